#!/usr/bin/env python3
"""scripts/kernel-ab-table.py on bench_kernels_cuda --json files of two settings over two
rounds: the best time per setting, the ratio to the first setting, rows filtered by regex,
a row missing from one setting, a repeated row kept apart, no files refused."""
import json
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "kernel-ab-table.py")


def row(kernel, shape, t):
    return {"kernel": kernel, "shape": shape, "value": 1.0, "unit": "GB/s", "time_us": t,
            "anchor": "", "ratio": 0.0}


def run(folder, match, *names):
    return subprocess.run([sys.executable, SCRIPT, folder, match, *names], capture_output=True,
                          text=True)


def main():
    with tempfile.TemporaryDirectory() as d:
        files = {
            "kernel-ab-1-l1.json": [row("tile_gemv", "M=1 32768x1280", 20.0), row("copy", "1 GiB", 300.0),
                                    row("stream_gemm", "M=1 32768x1280", 22.0),
                                    row("stream_gemm", "M=1 32768x1280", 30.0)],
            "kernel-ab-2-l1.json": [row("tile_gemv", "M=1 32768x1280", 19.0), row("copy", "1 GiB", 310.0)],
            "kernel-ab-1-l2.json": [row("tile_gemv", "M=1 32768x1280", 26.0), row("copy", "1 GiB", 305.0)],
            "kernel-ab-2-l2.json": [row("tile_gemv", "M=1 32768x1280", 28.5), row("copy", "1 GiB", 299.0)],
            # another setting whose name ends like this one's must not be read as "l2"
            "kernel-ab-1-x-l2.json": [row("tile_gemv", "M=1 32768x1280", 1.0)],
        }
        for name, rows in files.items():
            with open(os.path.join(d, name), "w") as f:
                json.dump(rows, f)
        p = run(d, "", "l1", "l2")
        assert p.returncode == 0, p.stderr
        lines = {ln.split("  ")[0].strip(): ln.split() for ln in p.stdout.splitlines()[1:]}
        tile = [ln for ln in p.stdout.splitlines() if ln.startswith("tile_gemv")][0].split()
        assert tile[-3:] == ["19.0", "26.0", "1.368"], tile  # best of two rounds each, 26 / 19
        copy = [ln for ln in p.stdout.splitlines() if ln.startswith("copy")][0].split()
        assert copy[-3:] == ["300.0", "299.0", "0.997"], copy
        stream = [ln for ln in p.stdout.splitlines() if ln.startswith("stream_gemm")]
        assert len(stream) == 2, p.stdout  # the repeated row apart (#2)
        assert stream[0].split()[-3:] == ["22.0", "-", "-"], stream  # not measured under l2
        assert stream[1].split()[3] == "#2" and stream[1].split()[-3] == "30.0", stream
        p = run(d, r"M=1 ", "l1", "l2")
        assert p.returncode == 0 and "copy" not in p.stdout and "tile_gemv" in p.stdout, p.stdout
        p = run(d, "", "none", "l2")
        assert p.returncode == 2 and "no kernel-ab-<round>-none.json" in p.stderr, (p.returncode, p.stderr)
        assert lines  # the table has rows
    print("kernel-ab-table: all checks passed")


if __name__ == "__main__":
    main()
