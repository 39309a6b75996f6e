#!/usr/bin/env bash
# One device call's command (run it as the `run` command, carrying build-cuda-fwd/fwd-bundle.tar.xz,
# or v4-golden.tar.xz with no preset: the v4_public golden on the GPU):
# an optional gate -- the GPU tests matching $DEEPINFER_GATE (a doctest -tc pattern, e.g.
# "*pipe_gemm*") under a 120 s timeout, so that a new kernel that hangs or fails costs seconds,
# not the call (DEEPINFER_GATE_STOP=hang: go on unless the gate timed out or crashed -- for opt-in
# kernels whose failure leaves the default path's figures meaningful) -- then scripts/gpu-forward.sh "$@" (presets, DEEPINFER_* switches as documented
# there) under $DEEPINFER_CALL_TIMEOUT seconds (default 480). A device call brings back only a
# few files, so every log is packed into $OUT/logs.tgz beside the combined $OUT/all.log, which
# ends with scripts/acceptance-summary.py's figures against issue 5's targets.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}
logs=$(mktemp -d)
mkdir -p "$out" /tmp/fwd
# Whichever bundle was carried (fwd-bundle.tar.xz, or v4-golden.tar.xz with no preset).
for b in build-cuda-fwd/fwd-bundle.tar.xz build-cuda-fwd/v4-golden.tar.xz; do
  if [[ -f $b ]]; then tar -C /tmp/fwd -xJf "$b"; fi
done
export LD_LIBRARY_PATH=/tmp/fwd/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export DEEPINFER_SHARED_DIR=/tmp/fwd/shared DEEPINFER_BUNDLE_UNPACKED=1
rc=0
if [[ -n ${DEEPINFER_GATE:-} ]]; then
  DEEPINFER_SOURCE_DIR=$PWD timeout 120 /tmp/fwd/tests/test_kernels_cuda -tc="$DEEPINFER_GATE" \
    >"$logs/gate.log" 2>&1
  rc=$?
  echo "gate ($DEEPINFER_GATE) rc=$rc"
  grep -E "^\[doctest\] (test cases|assertions)|ERROR" "$logs/gate.log" | head -20
  # doctest exits 1 on a failed assertion; a timeout is 124, a signal 128+.
  if [[ ${DEEPINFER_GATE_STOP:-fail} == hang && $rc == 1 ]]; then rc=0; fi
fi
if [[ $rc == 0 ]]; then
  OUT=$logs timeout "${DEEPINFER_CALL_TIMEOUT:-480}" scripts/gpu-forward.sh "$@" >"$logs/all.log" 2>&1
  echo "gpu-forward rc=$?"
  # Each acceptance figure beside its target (whatever this call measured), on which card.
  nvidia-smi --query-gpu=name --format=csv,noheader >"$logs/gpu.txt" 2>/dev/null
  python3 scripts/acceptance-summary.py "$logs" 2>&1 | tee -a "$logs/all.log"
  cp "$logs/all.log" "$out/"
fi
tar -C "$logs" -czf "$out/logs.tgz" .
