#!/bin/bash
# WIP device call for branch stream-tma-wip: stream_gemm TMA rings -- the stream_gemm GPU tests
# first (stops if they fail), kernel bench with TMA off / on, all GPU tests, then v41-flash-L4
# decode with TMA on / off. Device call: carry ["build-cuda-fwd/fwd-bundle.tar.xz"], command:
# bash scripts/wip-stream-tma-call.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/fwd
tar -C /tmp/fwd -xJf build-cuda-fwd/fwd-bundle.tar.xz
export LD_LIBRARY_PATH=/tmp/fwd/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export DEEPINFER_SHARED_DIR=/tmp/fwd/shared
di=/tmp/fwd/bin/deepinfer
DEEPINFER_SOURCE_DIR=$PWD timeout 120 /tmp/fwd/tests/test_kernels_cuda -tc="*stream_gemm*" >"$out/gate.log" 2>&1
rc=$?; echo "gate rc=$rc"; grep -E "^\[doctest\] (test cases|assertions)|ERROR" -A3 "$out/gate.log" | head -30
[[ $rc == 0 ]] || exit 1
( $di make-model --preset v41-flash-L4 --out /tmp/models/v41 --quiet >"$out/mm.log" 2>&1; echo "make-model rc=$?" >>"$out/mm.log" ) &
mm=$!
for tma in 0 -1; do
  DEEPINFER_BENCH_DECODE_ONLY=1 DEEPINFER_STREAM_TMA=$tma timeout 100 /tmp/fwd/bin/bench_kernels_cuda --filter "V4.1 fp8" >"$out/fp8-tma$tma.log" 2>&1
  echo "== stream tma $tma rc=$?"; grep -E "stream_gemm M=1|stream_gemm M=8" -A2 "$out/fp8-tma$tma.log" | grep -E "M=8|weight stream" | cut -c1-30,60-140
done
for t in test_kernels_cuda test_cuda_model_ops; do
  DEEPINFER_SOURCE_DIR=$PWD timeout 150 /tmp/fwd/tests/$t >"$out/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$out/$t.log" | tr -s ' ' | paste -sd' ')"
  grep -E "ERROR|FATAL" -A3 "$out/$t.log" | head -20
done
timeout 200 /tmp/fwd/tests/test_forward_cuda -s >"$out/test_forward_cuda.log" 2>&1
echo "test_forward_cuda rc=$?"
grep -E "PDL|argmax 23|test cases:|ERROR|FAILED" "$out/test_forward_cuda.log" | sed 's/.*MESSAGE: //' | sort -u | head -30
wait $mm; tail -1 "$out/mm.log"
for tma in -1 0; do
  echo "== DEEPINFER_STREAM_TMA=$tma"
  DEEPINFER_STREAM_TMA=$tma timeout 120 $di bench decode --model /tmp/models/v41 --device cuda --batch 1,8,64 --context 1024 --steps 8 --cuda-graphs on 2>&1 | grep decode
done
