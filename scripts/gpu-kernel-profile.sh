#!/usr/bin/env bash
# On the GPU machine: Nsight Compute's sections (speed of light, memory workload, occupancy,
# warp states, scheduler, launch) for the first stream_gemm launches of each
# bench_kernels_cuda row group named in DEEPINFER_PROFILE_FILTERS (';'-separated --filter texts,
# default: the V4.1 MXFP4 w1 experts, interleaved first, and the V4.1 FP8 wo_b at M=1), --quick.
# Reports go to $OUT/ncu-kernel-<n>.txt. Unpacks the bundle of scripts/gpu-forward-bundle.sh.
#   DEEPINFER_PROFILE_KERNEL (kernel name regex, default stream_gemm; matched against the bare
#   function name unless DEEPINFER_PROFILE_NAME_BASE=demangled, which matches the whole demangled
#   name with its template arguments -- one instantiation, e.g.
#   'dense_wg_gemm_kernel<.int.64,' for "dense_wg_gemm_kernel<(int)64, ...>"), DEEPINFER_PROFILE_COUNT
#   (launches per filter, default 2), DEEPINFER_PROFILE_SKIP (matching launches skipped first,
#   default 0), DEEPINFER_PROFILE_FULL=1 (also instruction statistics and per-source-line stall
#   sampling: the executed instructions per byte read, and where warps wait),
#   DEEPINFER_PROFILE_SOURCE=1 (with FULL: also the report's source page per SASS instruction,
#   ncu-kernel-<n>-sass.csv, with the stall samples of each -- for the split-by-barrier analysis)
set -uo pipefail
source "$(dirname "$0")/gpu-profile-env.sh" bench_kernels_cuda
IFS=';' read -ra filters <<<"${DEEPINFER_PROFILE_FILTERS:-V4.1 mxfp4 w1;V4.1 fp8 wo_b}"
n=0
for f in "${filters[@]}"; do
  n=$((n + 1))
  DEEPINFER_BENCH_DECODE_ONLY=1 "$ncu" --clock-control none \
    --kernel-name-base "${DEEPINFER_PROFILE_NAME_BASE:-function}" \
    -k "regex:${DEEPINFER_PROFILE_KERNEL:-stream_gemm}" \
    --launch-count "${DEEPINFER_PROFILE_COUNT:-2}" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --launch-skip "${DEEPINFER_PROFILE_SKIP:-0}" \
    ${DEEPINFER_PROFILE_FULL:+--section InstructionStats --section ComputeWorkloadAnalysis \
      --section SourceCounters --print-details all} \
    ${DEEPINFER_PROFILE_SOURCE:+--import-source yes -f -o /tmp/ncu-kernel-$n} \
    /tmp/fwd/bin/bench_kernels_cuda --quick --filter "$f" >"$out/ncu-kernel-$n.txt" 2>&1
  echo "profile '$f': rc=$? -> ncu-kernel-$n.txt"
  if [[ -n ${DEEPINFER_PROFILE_SOURCE:-} ]]; then
    "$ncu" -i "/tmp/ncu-kernel-$n.ncu-rep" --page details --print-details all \
      >>"$out/ncu-kernel-$n.txt" 2>&1
    "$ncu" -i "/tmp/ncu-kernel-$n.ncu-rep" --page source --csv --print-source sass \
      >"$out/ncu-kernel-$n-sass.csv" 2>&1
  fi
done
