#!/usr/bin/env python3
"""The table of scripts/gpu-kernel-ab.sh: for each benchmark row (kernel and shape, in the
bench's order), each setting's best median time over the rounds and its ratio to the first
setting's (below 1: faster than the first).

    kernel-ab-table.py DIR MATCH NAME [NAME ...]

DIR holds kernel-ab-<round>-<NAME>.json (bench_kernels_cuda --json); MATCH is a regex that a
row's "kernel shape" must match ("" keeps every row). A row missing from a setting's files
shows "-". Exit 2 when no file of the first setting is there."""
import glob
import json
import os
import re
import sys


def rows_of(path):
    """[(key, time_us)]: a key given twice in one file (a repeated row) gets #2, #3, ..."""
    with open(path) as f:
        rows = json.load(f)
    seen, out = {}, []
    for r in rows:
        key = f"{r['kernel']} {r['shape']}"
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key += f" #{seen[key]}"
        out.append((key, float(r["time_us"])))
    return out


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    folder, match, names = argv[1], argv[2], argv[3:]
    pattern = re.compile(match) if match else None
    order, best = [], {name: {} for name in names}
    for name in names:
        files = sorted(glob.glob(os.path.join(folder, f"kernel-ab-*-{name}.json")))
        # (kernel-ab-1-a.json must not be read for a setting named "1-a"'s sibling)
        files = [f for f in files if re.fullmatch(rf"kernel-ab-\d+-{re.escape(name)}\.json", os.path.basename(f))]
        if not files and name == names[0]:
            print(f"kernel-ab-table: no kernel-ab-<round>-{name}.json in {folder}", file=sys.stderr)
            return 2
        for path in files:
            try:
                rows = rows_of(path)
            except (OSError, ValueError, KeyError) as e:
                print(f"kernel-ab-table: {path} unreadable ({e}): skipped", file=sys.stderr)
                continue
            for key, t in rows:
                if pattern and not pattern.search(key):
                    continue
                if key not in best[name] or t < best[name][key]:
                    best[name][key] = t
                if key not in order:
                    order.append(key)
    width = max([len(k) for k in order] + [10])
    print(f"{'row':<{width}} " + " ".join(f"{n:>10}" for n in names) +
          "".join(f" {n + '/' + names[0]:>12}" for n in names[1:]))
    for key in order:
        times = [best[n].get(key) for n in names]
        cells = " ".join(f"{t:>10.1f}" if t is not None else f"{'-':>10}" for t in times)
        ratios = "".join(
            f" {t / times[0]:>12.3f}" if t is not None and times[0] else f" {'-':>12}" for t in times[1:])
        print(f"{key:<{width}} {cells}{ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
