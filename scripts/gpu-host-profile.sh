#!/usr/bin/env bash
# On the GPU machine: where a decode step's wall time goes. Unpacks the bundle of
# scripts/gpu-forward-bundle.sh, makes preset $1 (default v41-flash-L4) and runs `bench decode`
# at batch DEEPINFER_PROFILE_BATCH (default 64) and context DEEPINFER_BENCH_CONTEXT (default
# 1024) under Nsight Systems when it is installed: the CUDA API calls (host side: launches,
# copies, synchronisations) and the kernels (GPU side): sums and full traces (xz) in $OUT/nsys_*;
# scripts/nsys-steps.py splits the traces into forward calls.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/fwd
[[ -x /tmp/fwd/bin/deepinfer ]] || tar -C /tmp/fwd -xJf build-cuda-fwd/fwd-bundle.tar.xz
export LD_LIBRARY_PATH=/tmp/fwd/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
preset=${1:-v41-flash-L4}
dir=/tmp/models/$preset
[[ -f $dir/config.json ]] || /tmp/fwd/bin/deepinfer make-model --preset "$preset" --out "$dir" --quiet
nsys=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -1)
[[ -n $nsys ]] || { echo "no nsys here"; exit 1; }
b=${DEEPINFER_PROFILE_BATCH:-64}
ctx=${DEEPINFER_BENCH_CONTEXT:-1024}
"$nsys" profile -o /tmp/nsys-decode --force-overwrite true --trace cuda,osrt --sample none \
  /tmp/fwd/bin/deepinfer bench decode --model "$dir" --device cuda --batch "$b" --context "$ctx" \
  --steps 4 --cuda-graphs "${DEEPINFER_BENCH_GRAPHS:-off}" >"$out/nsys-run.txt" 2>&1
tail -3 "$out/nsys-run.txt"
"$nsys" stats --report cuda_api_sum,cuda_gpu_kern_sum,cuda_gpu_trace,cuda_api_trace --format csv \
  --output "$out/nsys" /tmp/nsys-decode.nsys-rep >"$out/nsys-stats.log" 2>&1
xz -T0 -f "$out"/nsys_cuda_*trace.csv 2>/dev/null
ls -la "$out"
