#!/usr/bin/env bash
# On the GPU machine: Nsight Compute's sections (speed of light, memory workload, occupancy,
# warp states, scheduler, launch) for the first stream_gemm launches of each
# bench_kernels_cuda row group named in DEEPINFER_PROFILE_FILTERS (';'-separated --filter texts,
# default: the V4.1 MXFP4 w1 experts, interleaved, and the V4.1 FP8 wo_b at M=1), --quick.
# Reports go to $OUT/ncu-kernel-<n>.txt. Unpacks the bundle of scripts/gpu-forward-bundle.sh.
#   DEEPINFER_PROFILE_KERNEL (kernel name regex, default stream_gemm), DEEPINFER_PROFILE_COUNT
#   (launches per filter, default 2)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/fwd
[[ -x /tmp/fwd/bin/bench_kernels_cuda ]] || tar -C /tmp/fwd -xJf build-cuda-fwd/fwd-bundle.tar.xz
export LD_LIBRARY_PATH=/tmp/fwd/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[[ -n $ncu ]] || { echo "no ncu here"; exit 1; }
IFS=';' read -ra filters <<<"${DEEPINFER_PROFILE_FILTERS:-V4.1 mxfp4 il grouped w1;V4.1 fp8 wo_b}"
n=0
for f in "${filters[@]}"; do
  n=$((n + 1))
  DEEPINFER_BENCH_DECODE_ONLY=1 "$ncu" --clock-control none -k "regex:${DEEPINFER_PROFILE_KERNEL:-stream_gemm}" \
    --launch-count "${DEEPINFER_PROFILE_COUNT:-2}" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section LaunchStats \
    /tmp/fwd/bin/bench_kernels_cuda --quick --filter "$f" >"$out/ncu-kernel-$n.txt" 2>&1
  echo "profile '$f': rc=$? -> ncu-kernel-$n.txt"
done
