#!/usr/bin/env bash
# On the GPU machine: per-kernel GPU times of decode steps under Nsight Compute (one metric,
# gpu__time_duration; clocks left alone). Unpacks the bundle of scripts/gpu-forward-bundle.sh,
# makes preset $1 (default v41-flash-L4) and profiles `bench decode` at the batch sizes in
# DEEPINFER_PROFILE_BATCH (default 1), eagerly, 2 timed steps, context DEEPINFER_BENCH_CONTEXT
# (default 1024). One row per kernel launch (name, grid, block, ns) goes to
# $OUT/ncu-decode-b<batch>.csv; scripts/ncu-summary.py sums the last decode step by kernel.
# DEEPINFER_PROFILE_SKIP=N leaves the first N launches unprofiled (the prefill forwards of a
# large batch: 64 x 269 launches at v41-flash-L4 batch 64), DEEPINFER_PROFILE_COUNT=M profiles
# M launches after them.
set -uo pipefail
source "$(dirname "$0")/gpu-profile-env.sh" deepinfer
preset=${1:-v41-flash-L4}
dir=/tmp/models/$preset
[[ -f $dir/config.json ]] || /tmp/fwd/bin/deepinfer make-model --preset "$preset" --out "$dir" --quiet
for b in ${DEEPINFER_PROFILE_BATCH:-1}; do
  "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
    --launch-skip "${DEEPINFER_PROFILE_SKIP:-0}" ${DEEPINFER_PROFILE_COUNT:+--launch-count "$DEEPINFER_PROFILE_COUNT"} \
    /tmp/fwd/bin/deepinfer bench decode --model "$dir" --device cuda --batch "$b" \
    --context "${DEEPINFER_BENCH_CONTEXT:-1024}" --steps 2 --cuda-graphs off \
    2>"$out/ncu-decode-b$b.err" | python3 -c '
import csv, sys
rows = csv.reader(sys.stdin)
out = csv.writer(sys.stdout)
for r in rows:
    if "Kernel Name" in r:
        h = r
        cols = [h.index(c) for c in ("Kernel Name", "Grid Size", "Block Size", "gpu__time_duration.sum")]
        out.writerow(["kernel", "grid", "block", "ns"])
        next(rows)  # units row
        for r in rows:
            if len(r) == len(h): out.writerow([r[c].replace(",", "") for c in cols])
' >"$out/ncu-decode-b$b.csv"
  echo "batch $b: rc=$? $(wc -l <"$out/ncu-decode-b$b.csv") lines"; tail -3 "$out/ncu-decode-b$b.err"
done
