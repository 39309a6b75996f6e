# Shared steps of the libFuzzer runners (sourced by run_fuzz.sh and run_grammar_fuzz.sh): the
# toolchain probe, a stamp-gated sanitizer build and a fixed-seed run. Callers set `out`, `cxx`,
# `src` before calling.

fuzz_flags=(-std=c++20 -O1 -gline-tables-only -fsanitize=fuzzer,address,undefined
            -fno-sanitize-recover=all -fno-omit-frame-pointer)

# Exit 77 (ctest skip) when $cxx is missing or cannot link the libFuzzer runtime: a toolchain
# without it is a skip, not a failure of our code.
fuzz_require_toolchain() {
  if ! command -v "$cxx" >/dev/null 2>&1; then
    echo "SKIP: $cxx not found; install clang and libclang-rt-14-dev to run the fuzzers"
    exit 77
  fi
  mkdir -p "$out"
  printf 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }\n' \
    >"$out/probe.cpp"
  if ! "$cxx" -fsanitize=fuzzer "$out/probe.cpp" -o "$out/probe" >"$out/probe.log" 2>&1; then
    echo "SKIP: $cxx cannot link -fsanitize=fuzzer (is libclang-rt-14-dev installed?)"
    cat "$out/probe.log"
    exit 77
  fi
}

# fuzz_build <binary>: compiles "${sources[@]}" (two compilers at a time) and links them, only
# when a file of "${inputs[@]}" (or this library) changed since the last build.
fuzz_build() {
  local bin=$1 stamp o s
  stamp=$(cat "${inputs[@]}" "${BASH_SOURCE[0]}" | md5sum | cut -d' ' -f1)
  if [[ -x $bin && -f $bin.stamp && $(cat "$bin.stamp") == "$stamp" ]]; then return; fi
  echo "building $bin"
  local objs=()
  for s in "${sources[@]}"; do
    o=$out/$(echo "${s#$src/}" | tr / _).o
    "$cxx" "${fuzz_flags[@]}" "-I$src" -c "$s" -o "$o" &
    objs+=("$o")
    if (($(jobs -rp | wc -l) >= 2)); then wait -n; fi
  done
  wait
  "$cxx" "${fuzz_flags[@]}" "${objs[@]}" -lfmt -o "$bin"
  echo "$stamp" >"$bin.stamp"
}

# fuzz_run <binary> <runs> <max_len> [libFuzzer options...]: seed 1, corpus $out/work + $out/seeds.
fuzz_run() {
  local bin=$1 runs=$2 max_len=$3 start=$SECONDS status=0
  shift 3
  echo "fuzzing for $runs runs (seed 1)"
  # libFuzzer's default exit code for a crash is 77, which ctest would read as a skip.
  "$bin" -runs="$runs" -seed=1 -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 "$@" \
    -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$out/" -print_final_stats=1 \
    "$out/work" "$out/seeds" || status=$?
  if [[ $status -ne 0 ]]; then
    echo "FAIL: the fuzzer found a bug (exit $status); reproduce with: $bin $out/crash-*"
    exit 1
  fi
  echo "fuzzing finished in $((SECONDS - start)) s without a crash"
}
