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

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "SKIP: $cxx not found; install clang and libclang-rt-14-dev to run the fuzzers"
  exit 77
fi
mkdir -p "$out"
bin=$out/fuzz_safetensors_header

# A toolchain without the libFuzzer runtime is a skip, not a failure of our code.
printf 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }\n' \
  >"$out/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer "$out/probe.cpp" -o "$out/probe" >"$out/probe.log" 2>&1; then
  echo "SKIP: $cxx cannot link -fsanitize=fuzzer (is libclang-rt-14-dev installed?)"
  cat "$out/probe.log"
  exit 77
fi

sources=("$src/tests/fuzz/fuzz_safetensors_header.cpp" "$src/model/checkpoint/safetensors.cpp"
         "$src/model/checkpoint/detail/strict_json.cpp" "$src"/common/*.cpp)
inputs=("${sources[@]}" "$src"/model/checkpoint/*.hpp "$src"/model/checkpoint/detail/*.hpp
        "$src"/common/*.hpp "$src/kernels/dtype.hpp" "$0")
flags=(-std=c++20 -O1 -gline-tables-only -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=all -fno-omit-frame-pointer "-I$src")

# Rebuild only when a source, header or this script changed.
stamp=$(cat "${inputs[@]}" | md5sum | cut -d' ' -f1)
if [[ ! -x $bin || ! -f $bin.stamp || $(cat "$bin.stamp") != "$stamp" ]]; then
  echo "building $bin"
  objs=()
  for s in "${sources[@]}"; do
    o=$out/$(basename "${s%.cpp}").o
    "$cxx" "${flags[@]}" -c "$s" -o "$o" &
    objs+=("$o")
  done
  for job in $(jobs -p); do wait "$job"; done
  "$cxx" "${flags[@]}" "${objs[@]}" -lfmt -o "$bin"
  echo "$stamp" >"$bin.stamp"
fi

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

echo "fuzzing for $runs runs (seed 1)"
start=$SECONDS
# libFuzzer's default exit code for a crash is 77, which ctest would read as a skip.
status=0
"$bin" -runs="$runs" -seed=1 -max_len=4096 -timeout=10 -rss_limit_mb=2048 -dict="$dict" \
  -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$out/" -print_final_stats=1 \
  "$out/work" "$seeds" || status=$?
if [[ $status -ne 0 ]]; then
  echo "FAIL: the fuzzer found a bug (exit $status); reproduce with: $bin $out/crash-*"
  exit 1
fi
echo "fuzzing finished in $((SECONDS - start)) s without a crash"
