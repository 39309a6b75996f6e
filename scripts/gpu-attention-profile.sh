#!/usr/bin/env bash
# On the GPU machine: Nsight Compute on one attention_kernel launch of bench_attention_decode
# (the first L2-flushed one) per batch in DEEPINFER_PROFILE_BATCHES (default "1 128"): the full
# section set with per-source-line stall sampling. Into $OUT/ncu-attn.tgz: the details page
# (ncu-attn-b<B>.txt) and the source page per CUDA line and per SASS instruction
# (ncu-attn-src-b<B>-cuda.csv / -sass.csv: where warps wait, line by line). Unpacks the bundle
# of scripts/gpu-forward-bundle.sh.
set -uo pipefail
source "$(dirname "$0")/gpu-profile-env.sh" bench_attention_decode
tmp=$(mktemp -d)
for b in ${DEEPINFER_PROFILE_BATCHES:-1 128}; do
  "$ncu" --clock-control none -k regex:attention_kernel --launch-skip 5 --launch-count 1 \
    --set full --import-source yes -f -o "$tmp/attn-b$b" \
    /tmp/fwd/bin/bench_attention_decode --batch "$b" --iters 3 >"$tmp/run-b$b.log" 2>&1
  echo "profile b$b rc=$?"
  "$ncu" -i "$tmp/attn-b$b.ncu-rep" --page details --print-details all >"$tmp/ncu-attn-b$b.txt" 2>&1
  for s in cuda sass; do
    "$ncu" -i "$tmp/attn-b$b.ncu-rep" --page source --csv --print-source "$s" \
      >"$tmp/ncu-attn-src-b$b-$s.csv" 2>&1
  done
done
tar -C "$tmp" -czf "$out/ncu-attn.tgz" --exclude='*.ncu-rep' .
ls -la "$tmp"
