#!/usr/bin/env bash
# Tokenizer benchmark: builds a ~12 MB mixed corpus from local files (make_corpus.py says what),
# runs our encoder (hand-written and PCRE2 pre-tokenizers) and HF tokenizers single-threaded,
# interleaved over several rounds because other processes may share the cores, checks that all
# ids equal HF's on every document and on random tricky strings (fuzz_vs_hf.py), and prints a
# table (report.py). Outputs in bench/out/tokenizer.
# Env: ROUNDS (3), REPEAT (passes per round, 2), CORPUS_MB (12), DEEPINFER_BUILD_DIR (build-bench)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/bench/tokenizer"
build=${DEEPINFER_BUILD_DIR:-$root/build-bench}
out="$root/bench/out/tokenizer"
rounds=${ROUNDS:-3}
repeat=${REPEAT:-2}
tokenizer_dir="$root/assets/deepseek-v3-tokenizer"
[[ -f "$tokenizer_dir/tokenizer.json" ]] || tokenizer_dir="$root/../shared/models/deepseek-v3-tokenizer"
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.ids

# HF tokenizers from PyPI: the current python3 if it has it, else a venv under bench/out
# (Debian's system python refuses global pip installs; needs the python3-venv package).
py=python3
if ! python3 -c "import tokenizers" 2>/dev/null; then
  [[ -x "$out/venv/bin/python" ]] || python3 -m venv "$out/venv"
  py="$out/venv/bin/python"
  "$py" -c "import tokenizers" 2>/dev/null || "$py" -m pip install --quiet tokenizers
fi
echo "HF tokenizers $("$py" -c 'import tokenizers; print(tokenizers.__version__)')"

python3 "$here/make_corpus.py" "$out/corpus.jsonl" "${CORPUS_MB:-12}"

# Until the top-level CMakeLists adds bench/tokenizer, pull it in through a project include.
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  inc="$out/add_bench.cmake"
  echo "if(NOT TARGET bench_tokenizer)
  add_subdirectory(\"$here\" \"\${CMAKE_BINARY_DIR}/bench/tokenizer-local\")
endif()" > "$inc"
  grep -q "bench/tokenizer" "$root/CMakeLists.txt" && inc=""
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=OFF \
    -DDEEPINFER_TESTS=OFF ${inc:+-DCMAKE_PROJECT_INCLUDE="$inc"} > "$out/cmake.log"
fi
cmake --build "$build" -j "${DEEPINFER_JOBS:-2}" --target bench_tokenizer > "$out/build.log"
bench="$build/bin/bench_tokenizer"
"$py" "$here/fuzz_vs_hf.py" "$bench" "$tokenizer_dir" "$out"

for ((r = 0; r < rounds; ++r)); do
  echo "--- round $((r + 1))/$rounds"
  "$bench" --tokenizer "$tokenizer_dir" --corpus "$out/corpus.jsonl" --repeat "$repeat" \
    --json-out "$out/deepinfer.round$r.json" --ids-out "$out/deepinfer.ids" | grep rep
  "$py" "$here/hf_bench.py" "$tokenizer_dir/tokenizer.json" "$out/corpus.jsonl" --mode encode \
    --repeat "$repeat" --json-out "$out/hf-encode.round$r.json" --ids-out "$out/hf-encode.ids"
  "$bench" --tokenizer "$tokenizer_dir" --corpus "$out/corpus.jsonl" --repeat "$repeat" --pcre2 \
    --json-out "$out/deepinfer-pcre2.round$r.json" --ids-out "$out/deepinfer-pcre2.ids" | grep rep
  "$py" "$here/hf_bench.py" "$tokenizer_dir/tokenizer.json" "$out/corpus.jsonl" --mode batch \
    --repeat "$repeat" --json-out "$out/hf-batch.round$r.json" --ids-out "$out/hf-batch.ids"
done
python3 "$here/report.py" "$out" "$out/corpus.jsonl"
