#!/usr/bin/env bash
# Builds the grammar front-end fuzzer (tests/fuzz/fuzz_grammar.cpp) with clang++ (libFuzzer +
# ASan + UBSan) and runs it for a fixed number of iterations from seeds of every front end.
# Usage: run_grammar_fuzz.sh <source dir> <output dir>. Exit 77 (ctest skip) without a
# libFuzzer toolchain. FUZZ_RUNS overrides the iteration count for longer local runs.
set -euo pipefail

src=${1:?usage: run_grammar_fuzz.sh <source dir> <output dir>}
out=${2:?usage: run_grammar_fuzz.sh <source dir> <output dir>}
runs=${FUZZ_RUNS:-3000}
cxx=${FUZZ_CXX:-clang++}

source "$(dirname "$0")/fuzz_lib.sh"
fuzz_require_toolchain
bin=$out/fuzz_grammar

sources=("$src/tests/fuzz/fuzz_grammar.cpp" "$src"/common/*.cpp)
for f in "$src"/runtime/grammar/*.cpp "$src"/runtime/grammar/detail/*.cpp "$src"/runtime/grammar/json_schema/*.cpp; do
  case $(basename "$f") in
    token_*|grammar_matcher.cpp|response_format.cpp|token_class_cache.cpp) ;;  # need the tokenizer
    *) sources+=("$f") ;;
  esac
done
inputs=("${sources[@]}" "$src"/runtime/grammar/*.hpp "$src"/runtime/grammar/*/*.hpp "$src"/common/*.hpp "$0")
fuzz_build "$bin"

seeds=$out/seeds
rm -rf "$seeds" "$out/work"
mkdir -p "$seeds" "$out/work"
seed() { printf '%b' "$2" >"$seeds/$1"; }  # seed <name> <selector byte + text [\0 input]>
seed ebnf1 '\x00root ::= "a" b* | [0-9]+\nb ::= "b" | "(" root ")"\0a(b)b'
seed ebnf2 '\x00root ::= x{2,5} ("," x)*\nx ::= [a-z\\u00e9]+\0ab,cd'
seed lark '\x00start: item+\nitem: "a" | /[0-9]+/\0a12a'
seed regex1 '\x01(a|b)*c{1,3}[^x-z]\\d+$\0abcc12'
seed regex2 '\x01(?i)h(e|a)llo\\s+\\p{L}{2}\0Hallo  ab'
seed schema1 '\x02{"type":"object","properties":{"a":{"type":"integer","minimum":-3,"maximum":70},"b":{"type":"string","pattern":"^x+$"}},"required":["a"]}\0{"a":5}'
seed schema2 '\x02{"anyOf":[{"type":"array","items":{"$ref":"#"},"maxItems":3},{"enum":[1,"x",null]}]}\0[[1],"x"]'
seed schema3 '\x06{"$defs":{"p":{"type":"string","format":"date"}},"type":"array","prefixItems":[{"$ref":"#/$defs/p"}],"uniqueItems":true}\0["2020-01-01"]'
seed schema4 '\x0b{"type":"object","properties":{"t":{"type":"array","prefixItems":[{"const":1}]}},"allOf":[{"properties":{"u":{"type":"number"}}}]}\0{"t":[1],"u":2}'

# A unit may take up to 30 s (libFuzzer's later -timeout overrides fuzz_run's 10): a JSON
# Schema compiled for validation builds an automaton per exponent of its numbers' spellings
# (session 50), and a bounded integer of the seed corpus takes ~8 s of CPU under ASan + UBSan
# (~0.3 s in a release build) -- slow, not a hang.
fuzz_run "$bin" "$runs" 2048 -timeout=30
