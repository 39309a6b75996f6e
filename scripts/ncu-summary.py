#!/usr/bin/env python3
"""Sums the GPU time of one decode step by kernel from scripts/gpu-profile.sh's CSV.

Usage: scripts/ncu-summary.py ncu-decode-b1.csv [--top N]

Forward passes are told apart by their embedding launch (one per forward); the last one is the
last timed decode step. Times are Nsight Compute's gpu__time_duration with its cache flush
between launches, so small kernels read a little slower than inside a real step.
"""
import argparse
import collections
import csv
import re


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--step", type=int, default=None,
                    help="which forward to break down (0-based; default: the last one with as "
                         "many kernels as the longest after the first, i.e. not cut short)")
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"{a.csv}: no kernel rows")
    short = [re.sub(r"\(.*", "", r["kernel"]) for r in rows]
    marks = [i for i, n in enumerate(short) if n.endswith("::embedding_kernel")]
    if not marks:
        raise SystemExit(f"{a.csv}: no embedding launch, cannot find the steps")
    for begin, end in zip(marks, marks[1:] + [len(rows)]):
        total = sum(float(r["ns"]) for r in rows[begin:end]) / 1e3
        print(f"forward at launch {begin}: {end - begin} kernels, {total:.1f} us")
    bounds = list(zip(marks, marks[1:] + [len(rows)]))
    if a.step is None:  # the last whole step (the first one also loads: skipped when possible)
        rest = bounds[1:] or bounds
        most = max(e - b for b, e in rest)
        a.step = max(i for i, (b, e) in enumerate(bounds) if e - b >= most and (i > 0 or len(bounds) == 1))
    step = range(*bounds[a.step])
    by_kernel = collections.defaultdict(lambda: [0, 0.0, set()])
    for i in step:
        k = by_kernel[short[i][:80]]
        k[0] += 1
        k[1] += float(rows[i]["ns"]) / 1e3
        k[2].add(rows[i]["grid"])
    total = sum(v[1] for v in by_kernel.values())
    print(f"step {a.step}: {len(step)} kernels, {total:.1f} us")
    print(f"{'us':>8} {'share':>6} {'calls':>5}  kernel (grids)")
    for name, (calls, us, grids) in sorted(by_kernel.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"{us:8.1f} {us / total:6.1%} {calls:5d}  {name} {sorted(grids)[:3]}")


if __name__ == "__main__":
    main()
