#!/usr/bin/env bash
# On the GPU machine: unpacks the bundle scripts/gpu-forward-bundle.sh made (carry
# build-cuda-fwd/fwd-bundle.tar.xz, or v4-golden.tar.xz), runs the GPU tests it holds, then --
# with a preset name as $1 (v41-flash-L4 / v4-flash-L4) -- makes that checkpoint on the
# machine and runs the decode/prefill benchmarks on it. Logs go to $OUT.
#   DEEPINFER_BENCH_CONTEXT (default 2048), DEEPINFER_BENCH_BATCH (default 1,8,32,64),
#   DEEPINFER_BENCH_GRAPHS (decode through CUDA graphs: off, on or both -- the default),
#   DEEPINFER_KERNEL_BENCH (run bench_kernels_cuda --filter it first -- several filters separated
#   by ';' run one after another --, and bench_attention_decode
#   when bundled; DEEPINFER_ATTN_SWEEP=1 adds its splits sweep), DEEPINFER_COMPARE_DECODE=1
#   (decode again with stream_gemm's other variants and sm90_block_gemm's tiles),
#   DEEPINFER_SKIP_ORDERED=1 (no decode run with ordered K splits),
#   DEEPINFER_COMPARE_BATCHED=1 (decode again with per-sequence attention, graphs on),
#   DEEPINFER_COMPARE_ENV="VAR=value ..." (decode again with those settings, graphs on; sets
#   separated by ';' run one after another),
#   DEEPINFER_COMPARE_PREFILL_ENV="VAR=value ..." (prefill again with those settings),
#   DEEPINFER_COMPARE_ARGS="--logits host" (decode again with those bench arguments, graphs on;
#   with COMPARE_ENV: both in one run),
#   DEEPINFER_COMPARE_FP4_LAYOUT=1 (decode again with MXFP4 rows as stored, not interleaved),
#   DEEPINFER_COMPARE_PIPE=1 (decode again with the experts on pipe_gemm, not stream_gemm),
#   DEEPINFER_SKIP_PEER=1, DEEPINFER_SKIP_CLUSTER=1, DEEPINFER_SKIP_TESTS=1,
#   DEEPINFER_SKIP_PREFILL=1 (no prefill runs),
#   DEEPINFER_TIMELINE=N (decode again, graphs on, at DEEPINFER_TIMELINE_BATCH -- default 1,64 --
#   with `--timeline N`: N traced steps, where their device time went, kernel by kernel;
#   DEEPINFER_TIMELINE_PREFILL=N: the same for N prefills of 2048 tokens, unless SKIP_PREFILL),
#   a bundled bin/deepinfer-base (gpu-forward-bundle.sh's DEEPINFER_BASE_BIN, e.g. an older
#   commit's build): its decode (graphs on, or DEEPINFER_BASE_GRAPHS=off|both) and prefill run
#   on the same checkpoint, for comparison
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/fwd
for b in build-cuda-fwd/fwd-bundle.tar.xz build-cuda-fwd/v4-golden.tar.xz; do  # whichever came
  # (gpu-call.sh has unpacked it already)
  if [[ -f $b && ${DEEPINFER_BUNDLE_UNPACKED:-0} != 1 ]]; then tar -C /tmp/fwd -xJf "$b"; fi
done
export LD_LIBRARY_PATH=/tmp/fwd/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export DEEPINFER_SHARED_DIR=/tmp/fwd/shared
if [[ ${DEEPINFER_SKIP_TESTS:-0} != 1 ]]; then
  for t in /tmp/fwd/tests/test_kernels_cuda /tmp/fwd/tests/test_cuda_model_ops; do
    [[ -x $t ]] || continue
    DEEPINFER_SOURCE_DIR=$PWD "$t" >"$out/$(basename "$t").log" 2>&1
    rc=$?  # (read before any other command: "$(basename ...) rc=$?" printed basename's status)
    echo "$(basename "$t") rc=$rc $(grep -E '^\[doctest\] (test cases|assertions)' \
      "$out/$(basename "$t").log" | tr -s ' ' | paste -sd' ')"
    grep -E "ERROR|FATAL" -A3 "$out/$(basename "$t").log" | head -20
  done
  /tmp/fwd/tests/test_forward_cuda -s >"$out/test_forward_cuda.log" 2>&1
  echo "test_forward_cuda rc=$?"
  grep -E "GPU |graphs|not run|status:|test cases:|ERROR|FAILED" "$out/test_forward_cuda.log" |
    grep -v "^  CHECK" | sort -u | head -60
fi
di=/tmp/fwd/bin/deepinfer
# The actor cluster with its executor on the GPU (tiny-v41; client == generate --device cuda).
if [[ -x $di && ${DEEPINFER_SKIP_CLUSTER:-0} != 1 ]]; then
  DEEPINFER_BIN=$di timeout 300 scripts/gpu-cluster.sh 2>&1 | tee "$out/cluster.log" | tail -5
fi
# Per-kernel benchmarks (GEMM rows whose label holds $DEEPINFER_KERNEL_BENCH, e.g. "M=1").
if [[ -n ${DEEPINFER_KERNEL_BENCH:-} && -x /tmp/fwd/bin/bench_kernels_cuda ]]; then
  IFS=';' read -ra filters <<<"$DEEPINFER_KERNEL_BENCH"  # "wo_a;mxfp4 il routed": one run each
  : >"$out/bench_kernels_cuda.log"
  for f in "${filters[@]}"; do
    /tmp/fwd/bin/bench_kernels_cuda --filter "$f" >>"$out/bench_kernels_cuda.log" 2>&1
    echo "bench_kernels_cuda ($f) rc=$?"
  done
  tail -70 "$out/bench_kernels_cuda.log"
  if [[ -x /tmp/fwd/bin/bench_attention_decode ]]; then  # attention decode vs FlashMLA's anchor
    /tmp/fwd/bin/bench_attention_decode ${DEEPINFER_ATTN_SWEEP:+--splits-sweep} \
      >"$out/bench_attention_decode.log" 2>&1
    echo "bench_attention_decode rc=$?"
    tail -20 "$out/bench_attention_decode.log"
  fi
fi
# Benchmarks: each preset named on the command line is made here, benchmarked, removed.
ctx=${DEEPINFER_BENCH_CONTEXT:-2048}
batches=${DEEPINFER_BENCH_BATCH:-1,8,32,64}
for preset in "$@"; do
  dir=/tmp/models/$preset
  t0=$(date +%s%N)
  "$di" make-model --preset "$preset" --out "$dir" --quiet --force || { echo "make-model $preset failed"; continue; }
  echo "make-model $preset: $(( ($(date +%s%N) - t0) / 1000000 )) ms, $(du -sh "$dir" | cut -f1)"
  "$di" bench decode --model "$dir" --device cuda --batch "$batches" --context "$ctx" --steps 8 \
    --cuda-graphs "${DEEPINFER_BENCH_GRAPHS:-both}" \
    2>&1 | tee "$out/bench-decode-$preset.log"
  if [[ ${DEEPINFER_COMPARE_DECODE:-0} == 1 ]]; then
    DEEPINFER_STREAM_GEMM=0 "$di" bench decode --model "$dir" --device cuda --batch "$batches" \
      --context "$ctx" --steps 8 --cuda-graphs on 2>&1 | tee "$out/bench-decode-smem-$preset.log" |
      grep decode | sed 's/^/smem tiles: /'
    for v in 0 1; do  # stream_gemm's variants forced
      DEEPINFER_STREAM_VARIANT=$v "$di" bench decode --model "$dir" --device cuda \
        --batch "$batches" --context "$ctx" --steps 8 --cuda-graphs on 2>&1 |
        tee "$out/bench-decode-stream$v-$preset.log" | grep decode | sed "s/^/stream variant $v: /"
    done
  fi
  if [[ -n ${DEEPINFER_COMPARE_ENV:-}${DEEPINFER_COMPARE_ARGS:-} ]]; then  # decode again (graphs on)
    IFS=';' read -ra envsets <<<"${DEEPINFER_COMPARE_ENV:-}"  # "A=1;B=2": one run per set
    [[ ${#envsets[@]} -gt 0 ]] || envsets=("")
    for i in "${!envsets[@]}"; do
      env ${envsets[$i]} "$di" bench decode --model "$dir" --device cuda --batch "$batches" \
        --context "$ctx" --steps 8 --cuda-graphs on ${DEEPINFER_COMPARE_ARGS:-} 2>&1 |
        tee "$out/bench-decode-env$i-$preset.log" |
        grep decode | sed "s/^/${envsets[$i]}${DEEPINFER_COMPARE_ARGS:-}: /"
    done
  fi
  if [[ -n ${DEEPINFER_TIMELINE:-} ]]; then  # the device timeline of graph steps (CUPTI)
    "$di" bench decode --model "$dir" --device cuda --batch "${DEEPINFER_TIMELINE_BATCH:-1,64}" \
      --context "$ctx" --steps 8 --cuda-graphs on --timeline "$DEEPINFER_TIMELINE" 2>&1 |
      tee "$out/bench-decode-timeline-$preset.log"
  fi
  if [[ ${DEEPINFER_COMPARE_BATCHED:-0} == 1 ]]; then  # the per-sequence attention path
    "$di" bench decode --model "$dir" --device cuda --batch "$batches" --context "$ctx" --steps 8 \
      --cuda-graphs on --per-sequence-decode 2>&1 | tee "$out/bench-decode-perseq-$preset.log" |
      grep decode | sed 's/^/per-sequence: /'
  fi
  if [[ ${DEEPINFER_COMPARE_FP4_LAYOUT:-0} == 1 ]]; then  # experts' rows as the checkpoint has them
    DEEPINFER_FP4_INTERLEAVE=0 "$di" bench decode --model "$dir" --device cuda --batch "$batches" \
      --context "$ctx" --steps 8 --cuda-graphs on 2>&1 | tee "$out/bench-decode-plainfp4-$preset.log" |
      grep decode | sed 's/^/fp4 rows as stored: /'
  fi
  if [[ ${DEEPINFER_COMPARE_PIPE:-0} == 1 ]]; then  # the experts on pipe_gemm
    DEEPINFER_PIPE_GEMM=1 "$di" bench decode --model "$dir" --device cuda --batch "$batches" \
      --context "$ctx" --steps 8 --cuda-graphs both 2>&1 | tee "$out/bench-decode-pipe-$preset.log" |
      grep decode | sed 's/^/experts on pipe_gemm: /'
  fi
  if [[ ${DEEPINFER_SKIP_ORDERED:-0} != 1 ]]; then
    "$di" bench decode --model "$dir" --device cuda --batch 1,64 --context "$ctx" --steps 8 \
      --cuda-graphs on --ordered-splits 2>&1 | tee "$out/bench-decode-ordered-$preset.log" |
      grep decode
  fi
  if [[ ${DEEPINFER_SKIP_PREFILL:-0} != 1 ]]; then
    "$di" bench prefill --model "$dir" --device cuda --batch 1 --context 2048 --steps 8 \
      2>&1 | tee "$out/bench-prefill-$preset.log"
    if [[ -n ${DEEPINFER_COMPARE_PREFILL_ENV:-} ]]; then  # prefill again with those settings
      env $DEEPINFER_COMPARE_PREFILL_ENV "$di" bench prefill --model "$dir" --device cuda \
        --batch 1 --context 2048 --steps 8 2>&1 | tee "$out/bench-prefill-env-$preset.log" |
        grep prefill | sed "s/^/$DEEPINFER_COMPARE_PREFILL_ENV: /"
    fi
    if [[ -n ${DEEPINFER_TIMELINE_PREFILL:-} ]]; then  # the device timeline of prefills (CUPTI)
      "$di" bench prefill --model "$dir" --device cuda --batch 1 --context 2048 --steps 8 \
        --timeline "$DEEPINFER_TIMELINE_PREFILL" 2>&1 | tee "$out/bench-prefill-timeline-$preset.log"
    fi
  fi
  if [[ -x /tmp/fwd/bin/deepinfer-base ]]; then  # the baseline build on the same checkpoint
    /tmp/fwd/bin/deepinfer-base bench decode --model "$dir" --device cuda --batch "$batches" \
      --context "$ctx" --steps 8 --cuda-graphs "${DEEPINFER_BASE_GRAPHS:-on}" 2>&1 |
      tee "$out/bench-decode-base-$preset.log" | grep decode | sed 's/^/baseline: /'
    if [[ ${DEEPINFER_SKIP_PREFILL:-0} != 1 ]]; then
      /tmp/fwd/bin/deepinfer-base bench prefill --model "$dir" --device cuda --batch 1 \
        --context 2048 --steps 8 2>&1 | tee "$out/bench-prefill-base-$preset.log" |
        grep prefill | sed 's/^/baseline: /'
    fi
  fi
  for graphs in off on; do  # greedy text: the same both ways
    "$di" generate --model "$dir" --device cuda --prompt "The H200 has" --max-tokens 16 \
      --temperature 0 --ignore-eos --cuda-graphs $graphs 2>&1 | tee "$out/generate-$preset-graphs-$graphs.log" |
      tail -2
  done
  if [[ $preset == v4-flash-L4 && ${DEEPINFER_SKIP_PEER:-0} != 1 ]]; then
    PYTHONUNBUFFERED=1 timeout 240 python3 bench/peer/transformers_v4.py --model "$dir" \
      --batch 1,64 --context "$ctx" --prefill 2048 2>&1 | grep -v Warning |
      tee "$out/peer-$preset.log" | grep -E "^peer"
  fi
  if [[ -n ${DEEPINFER_PROFILE_BATCH:-} ]]; then  # per-kernel times (scripts/gpu-profile.sh)
    scripts/gpu-profile.sh "$preset"
  fi
  rm -rf "$dir"
done
