#!/bin/bash
# WIP device call for branch session12-wip (session 12, not run yet):
# dense FP8 decode GEMMs
# with their weights streamed by TMA -- stream_gemm's per-warp TMA rings (on by default on this
# branch, DEEPINFER_STREAM_TMA=0 off) and dense_wg_gemm on wgmma with TMA stages
# (DEEPINFER_DENSE_WG=1, DEEPINFER_DENSE_WG_AMODE=5); and wg_gemm's ring filled by bulk copies
# (DEEPINFER_WG_RING=2); engram_gate, cache encode, rotary and RMSNorm
# rewritten for batch 1; fp32 decode projections on f32_gemv instead of cuBLAS SGEMV
# (DEEPINFER_F32_GEMV=0 off); rms_norm(hc_collapse) fused (DEEPINFER_HC_COLLAPSE_NORM=0 off);
# the window KV rows' norm + rope + FP8 rounding in one kernel (DEEPINFER_NORM_ROPE_QUANT=0 off);
# q_norm's, SwiGLU's and hc_collapse_norm's kernels emitting their consumers' FP8 codes
# (DEEPINFER_FUSED_ACT_QUANT=0 off).
# Their GPU tests first (each under 120 s; a failed one switches its
# experiment off for the rest), then bench_kernels_cuda's V4.1 fp8 and routed rows (decode
# only), every GPU test, and v41-flash-L4 decode with each experiment on and off.
# Two device calls, each carrying ["build-cuda-fwd/fwd-bundle.tar.xz"]:
#   bash scripts/wip-stream-tma-call.sh kernels      (gates + kernel benchmarks, ~5 min)
#   bash scripts/wip-stream-tma-call.sh model [VAR=0 ...]   (all GPU tests + decode, ~6 min;
#     pass DEEPINFER_STREAM_TMA=0 etc. for the experiments whose gate failed in the first call)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/fwd
tar -C /tmp/fwd -xJf build-cuda-fwd/fwd-bundle.tar.xz
for f in build-cuda-fwd/override/*.xz; do  # test binaries rebuilt after the bundle (optional)
  [[ -e $f ]] || continue
  xz -dc "$f" >"/tmp/fwd/tests/$(basename "$f" .xz)" && chmod +x "/tmp/fwd/tests/$(basename "$f" .xz)"
done
export LD_LIBRARY_PATH=/tmp/fwd/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export DEEPINFER_SHARED_DIR=/tmp/fwd/shared
di=/tmp/fwd/bin/deepinfer
gate() {  # name, pattern, VAR=value...: the GPU kernel tests matching pattern, under 120 s
  local name=$1 pattern=$2; shift 2
  env "$@" DEEPINFER_SOURCE_DIR=$PWD timeout 120 /tmp/fwd/tests/test_kernels_cuda -tc="$pattern" \
    >"$out/gate-$name.log" 2>&1
  local rc=$?
  echo "gate $name rc=$rc"; grep -E "^\[doctest\] (test cases|assertions)|ERROR" -A3 "$out/gate-$name.log" | head -30
  return $rc
}
phase=${1:-kernels}; shift || true
if [[ $phase == kernels ]]; then  # call 1: each experiment's GPU tests, then the kernel rows
# A failed experiment is switched off for the rest of the call (the others still measured);
# pass its VAR=0 to the model call.
modes=()
if gate stream_tma "*stream_gemm*"; then
  modes+=("DEEPINFER_STREAM_TMA=-1" "DEEPINFER_STREAM_TMA=0")
else
  export DEEPINFER_STREAM_TMA=0
  modes+=("DEEPINFER_STREAM_TMA=0")
fi
gate dense_tma "*dense_wg*" DEEPINFER_DENSE_WG_AMODE=5
gate wg_bulk "*wg_gemm*" && modes+=("DEEPINFER_WG_RING=2")
if gate f32_gemv "*f32_gemv*"; then modes+=("DEEPINFER_F32_GEMV=0"); else export DEEPINFER_F32_GEMV=0; fi
if gate fused_act_quant "*quantized_rows*"; then modes+=("DEEPINFER_FUSED_ACT_QUANT=0"); else export DEEPINFER_FUSED_ACT_QUANT=0; fi
if gate norm_rope_quant "*norm_rope_quant*"; then modes+=("DEEPINFER_NORM_ROPE_QUANT=0"); else export DEEPINFER_NORM_ROPE_QUANT=0; fi
# engram_gate, cache encode, rotary and RMSNorm rewritten for batch 1
gate small_kernels "*rotary*,*rms_norm*"
DEEPINFER_SOURCE_DIR=$PWD timeout 120 /tmp/fwd/tests/test_cuda_model_ops -tc="*engram_gate*,*encode*" \
  >"$out/gate-model.log" 2>&1
echo "gate model kernels rc=$?"; grep -E "^\[doctest\] (test cases|assertions)|ERROR" -A3 "$out/gate-model.log" | head -20
# hc_collapse_norm (the model uses it at every mHC site): off for the rest if its test fails
if DEEPINFER_SOURCE_DIR=$PWD timeout 120 /tmp/fwd/tests/test_cuda_model_ops -tc="*hc_collapse_norm*" \
  >"$out/gate-hcnorm.log" 2>&1; then
  echo "gate hc_collapse_norm rc=0"; modes+=("DEEPINFER_HC_COLLAPSE_NORM=0")
else
  echo "gate hc_collapse_norm FAILED"; grep -E "ERROR" -A3 "$out/gate-hcnorm.log" | head; export DEEPINFER_HC_COLLAPSE_NORM=0
fi
for amode in 5; do  # (AMODE 0, the cp.async stages, was measured in session 11)
  DEEPINFER_BENCH_DECODE_ONLY=1 DEEPINFER_DENSE_WG_AMODE=$amode timeout 150 /tmp/fwd/bin/bench_kernels_cuda \
    --filter "V4.1 fp8" >"$out/fp8-amode$amode.log" 2>&1
  echo "== bench V4.1 fp8, dense_wg AMODE $amode rc=$?"
  grep -E "M=1 |M=8 |M=64 " -A2 "$out/fp8-amode$amode.log" | grep -E "M=8|M=64|weight stream|M=1 " | grep -v eager | cut -c1-40,60-150
done
DEEPINFER_BENCH_DECODE_ONLY=1 timeout 150 /tmp/fwd/bin/bench_kernels_cuda --filter "il routed" \
  >"$out/routed.log" 2>&1
echo "== bench il routed rc=$?"; grep -E "il routed" "$out/routed.log" | cut -c1-60,75-150
echo "experiments whose gate passed (compare them in the model call): ${modes[*]}"
  exit 0
fi
if [[ $phase == ab ]]; then  # call 3: gates, the fp8 kernel rows, then interleaved model A/B
  gate stream_tma "*stream_gemm*"
  gate fused_act_quant "*quantized_rows*"
  DEEPINFER_BENCH_DECODE_ONLY=1 timeout 150 /tmp/fwd/bin/bench_kernels_cuda --filter "V4.1 fp8" \
    >"$out/fp8.log" 2>&1
  echo "== bench V4.1 fp8 rc=$?"
  grep -E "M=1 " "$out/fp8.log" | grep -v eager | grep -E "stream|dense_wg" | cut -c1-40,60-80
  $di make-model --preset v41-flash-L4 --out /tmp/models/v41 --quiet >"$out/mm.log" 2>&1
  echo "make-model rc=$?"
  off="DEEPINFER_F32_GEMV=0 DEEPINFER_HC_COLLAPSE_NORM=0 DEEPINFER_NORM_ROPE_QUANT=0 DEEPINFER_FUSED_ACT_QUANT=0"
  configs=("none:$off DEEPINFER_STREAM_TMA=0" "all:DEEPINFER_STREAM_TMA=0" "all+tma:DEEPINFER_STREAM_TMA=-1"
           "no-f32gemv:DEEPINFER_STREAM_TMA=0 DEEPINFER_F32_GEMV=0"
           "no-fusedq:DEEPINFER_STREAM_TMA=0 DEEPINFER_FUSED_ACT_QUANT=0"
           "no-hcnorm:DEEPINFER_STREAM_TMA=0 DEEPINFER_HC_COLLAPSE_NORM=0 DEEPINFER_FUSED_ACT_QUANT=0"
           "no-nrq:DEEPINFER_STREAM_TMA=0 DEEPINFER_NORM_ROPE_QUANT=0")
  for round in 1 2; do
    for c in "${configs[@]}"; do
      name=${c%%:*}; vars=${c#*:}
      env $vars timeout 100 $di bench decode --model /tmp/models/v41 --device cuda \
        --batch 1,8,64 --context 1024 --steps ${AB_STEPS:-48} --cuda-graphs on 2>&1 | grep "^decode" |
        awk -v n="$name" -v r="$round" '{printf "r%s %-11s b%-3s %s ms\n", r, n, $3, $9}'
    done
  done
  exit 0
fi
# call 2 (phase model, then VAR=value... for the experiments whose gate failed in call 1):
# every GPU test and v41-flash-L4 decode with each experiment on and off.
for setting in "$@"; do export "$setting"; done
# The gates of the experiments that are on by default: a failed one is switched off here.
gate stream_tma "*stream_gemm*" || export DEEPINFER_STREAM_TMA=0
gate fused_act_quant "*quantized_rows*" || export DEEPINFER_FUSED_ACT_QUANT=0
( $di make-model --preset v41-flash-L4 --out /tmp/models/v41 --quiet >"$out/mm.log" 2>&1; echo "make-model rc=$?" >>"$out/mm.log" ) &
mm=$!
modes=("DEEPINFER_STREAM_TMA=0" "DEEPINFER_WG_RING=2" "DEEPINFER_F32_GEMV=0" "DEEPINFER_HC_COLLAPSE_NORM=0"
       "DEEPINFER_NORM_ROPE_QUANT=0" "DEEPINFER_FUSED_ACT_QUANT=0")
for t in test_kernels_cuda test_cuda_model_ops; do
  DEEPINFER_SOURCE_DIR=$PWD timeout 150 /tmp/fwd/tests/$t >"$out/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$out/$t.log" | tr -s ' ' | paste -sd' ')"
  grep -E "ERROR|FATAL" -A3 "$out/$t.log" | head -20
done
timeout 200 /tmp/fwd/tests/test_forward_cuda -s >"$out/test_forward_cuda.log" 2>&1
echo "test_forward_cuda rc=$?"
grep -E "PDL|argmax 23|test cases:|ERROR|FAILED" "$out/test_forward_cuda.log" | sed 's/.*MESSAGE: //' | sort -u | head -30
wait $mm; tail -1 "$out/mm.log"
for mode in "" "${modes[@]}"; do
  echo "== ${mode:-defaults}"
  env ${mode:+"$mode"} timeout 120 $di bench decode --model /tmp/models/v41 --device cuda \
    --batch 1,8,64 --context 1024 --steps 8 --cuda-graphs on 2>&1 | grep decode
done
