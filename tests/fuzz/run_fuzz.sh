#!/usr/bin/env bash
# Builds the safetensors header fuzzer with clang++ (libFuzzer + ASan + UBSan) into the build
# tree and runs it for a fixed number of iterations from a generated seed corpus with a fixed
# seed. Usage: run_fuzz.sh <source dir> <output dir>. Exit 77 (ctest skip) without clang++.
# FUZZ_RUNS overrides the iteration count for longer local runs.
set -euo pipefail

src=${1:?usage: run_fuzz.sh <source dir> <output dir>}
out=${2:?usage: run_fuzz.sh <source dir> <output dir>}
runs=${FUZZ_RUNS:-30000}
cxx=${FUZZ_CXX:-clang++}

source "$(dirname "$0")/fuzz_lib.sh"
fuzz_require_toolchain
bin=$out/fuzz_safetensors_header

sources=("$src/tests/fuzz/fuzz_safetensors_header.cpp" "$src/model/checkpoint/safetensors.cpp"
         "$src/model/checkpoint/detail/strict_json.cpp" "$src"/common/*.cpp)
inputs=("${sources[@]}" "$src"/model/checkpoint/*.hpp "$src"/model/checkpoint/detail/*.hpp
        "$src"/common/*.hpp "$src/kernels/dtype.hpp" "$0")
fuzz_build "$bin"

# Seed corpus: small valid files (8-byte little-endian header length, JSON header, data).
seeds=$out/seeds
rm -rf "$seeds" "$out/work"
mkdir -p "$seeds" "$out/work"
seed() {  # seed <name> <header json> <data bytes>
  local n=${#2}
  {
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((n & 255)) $((n >> 8 & 255)) \
      $((n >> 16 & 255)) $((n >> 24 & 255)))"
    printf '\0\0\0\0%s' "$2"
    head -c "$3" /dev/zero
  } >"$seeds/$1"
}
seed empty '{}' 0
seed one '{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' 8
seed meta '{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[1,3],"data_offsets":[0,6]}}' 6
seed fp8 '{"w.weight":{"dtype":"F8_E4M3","shape":[4,2],"data_offsets":[1,9]},"w.scale":{"dtype":"F8_E8M0","shape":[1,1],"data_offsets":[0,1]}}' 9
seed fp4 '{"e.weight":{"dtype":"I8","shape":[2,16],"data_offsets":[0,32]},"e.scale":{"dtype":"F8_E8M0","shape":[2,1],"data_offsets":[32,34]}}' 34
seed ints '{"t":{"dtype":"I64","shape":[2,1],"data_offsets":[0,16]},"s":{"dtype":"I32","shape":[],"data_offsets":[16,20]},"z":{"dtype":"U8","shape":[0],"data_offsets":[20,20]}}' 20
seed pair '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}' 8
seed zero_sized '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]}}' 8
seed misc '{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"b":{"dtype":"F64","shape":[1],"data_offsets":[2,10]},"c":{"dtype":"I16","shape":[1],"data_offsets":[10,12]},"d":{"dtype":"BOOL","shape":[1],"data_offsets":[12,13]}}' 13

dict=$out/safetensors.dict
printf '%s\n' '"dtype"' '"shape"' '"data_offsets"' '"__metadata__"' '"F8_E4M3"' '"F8_E8M0"' \
  '"BF16"' '"F32"' '"I8"' '"I64"' '"{"' '"}"' '"["' '"]"' '":"' '","' '"-1"' \
  '"18446744073709551615"' '"4294967296"' >"$dict"

fuzz_run "$bin" "$runs" 4096 -dict="$dict"
