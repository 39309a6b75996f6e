#!/usr/bin/env bash
# On the GPU machine (after scripts/gpu-bundle.sh here, with build-cuda/bundle carried):
# runs every gpu-labelled test, then the kernel benchmarks, and prints a short table last.
# Logs and JSON go to $OUT (the device tool's return folder) or /tmp/gpu-check.
# Usage: scripts/gpu-check.sh [bundle-dir] [--tests-only | --bench-only]
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=build-cuda/bundle
mode=all
for a in "$@"; do
  case $a in
    --tests-only) mode=tests ;;
    --bench-only) mode=bench ;;
    *) bundle=$a ;;
  esac
done
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
[[ -d $bundle/lib/ucx ]] && export UCX_MODULE_DIR="$bundle/lib/ucx"
export DEEPINFER_SOURCE_DIR=$PWD

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader \
  | tee "$out/gpu.txt"
summary=()
status=0
if [[ $mode != bench ]]; then
  for t in "$bundle"/tests/*; do
    name=$(basename "$t")
    start=$(date +%s%N)
    "$t" >"$out/$name.log" 2>&1
    rc=$?
    secs=$(( ($(date +%s%N) - start) / 1000000000 ))
    case $rc in
      0) verdict=passed ;;
      77) verdict=skipped ;;
      *) verdict="FAILED (rc $rc)"; status=1; tail -40 "$out/$name.log" ;;
    esac
    line=$(grep -E '^\[doctest\] (test cases|assertions)' "$out/$name.log" | tr -s ' ' | paste -sd' ')
    summary+=("$(printf '%-28s %-16s %6ss  %s' "$name" "$verdict" "$secs" "$line")")
  done
fi
if [[ $mode != tests ]]; then
  for b in "$bundle"/bin/bench_*; do
    name=$(basename "$b")
    "$b" --json "$out/$name.json" >"$out/$name.log" 2>&1
    rc=$?
    [[ $rc -eq 0 ]] || { status=1; summary+=("$name FAILED (rc $rc)"); tail -30 "$out/$name.log"; }
  done
fi
echo
echo "== gpu-check summary ($(head -1 "$out/gpu.txt")) =="
for s in "${summary[@]}"; do echo "$s"; done
# Each benchmark ends its log with its table (from the line "== <name> ==" on).
for log in "$out"/bench_*.log; do
  [[ -f $log ]] && sed -n '/^== /,$p' "$log"
done
exit $status
