#!/usr/bin/env python3
"""scripts/acceptance-summary.py on logs in the formats deepinfer bench, the peer script and the
kernel benchmarks write (lines as a device call produced them): each figure against its target,
what is missing reported as not measured, a bad directory refused."""
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "acceptance-summary.py")

LOGS = {
    "bench-decode-v41-flash-L4.log": """\
model /tmp/models/v41-flash-L4 (loaded in 8.26 s) | device cuda | threads 16 | copy bandwidth 4223.3 GB/s (read+write)
decode  batch    1 ctx   1024 graphs off:      2.89 ms/step     346.4 tok/s | read 2.797 GB weights + 0.001 GB cache | 969.3 GB/s = 23% of copy bandwidth
decode  batch    1 ctx   1024 graphs on :      2.34 ms/step     428.1 tok/s | read 2.797 GB weights + 0.001 GB cache | 1198.1 GB/s = 28% of copy bandwidth
decode  batch   64 ctx   1024 graphs off:     11.93 ms/step    5365.8 tok/s | read 20.685 GB weights + 0.053 GB cache | 1738.7 GB/s = 41% of copy bandwidth
decode  batch   64 ctx   1024 graphs on :     11.62 ms/step    5509.1 tok/s | read 20.685 GB weights + 0.053 GB cache | 1785.1 GB/s = 42% of copy bandwidth
""",
    "bench-decode-v4-flash-L4.log": """\
decode  batch    1 ctx   1024 graphs on :      2.19 ms/step     456.2 tok/s | read 2.011 GB weights + 0.001 GB cache | 917.9 GB/s = 22% of copy bandwidth
decode  batch   64 ctx   1024 graphs on :      9.01 ms/step    7107.2 tok/s | read 12.380 GB weights + 0.093 GB cache | 1385.1 GB/s = 33% of copy bandwidth
""",
    "bench-decode-base-v4-flash-L4.log": """\
decode  batch    1 ctx   1024 graphs on :      2.25 ms/step     444.4 tok/s | read 2.011 GB weights + 0.001 GB cache | 893.8 GB/s = 21% of copy bandwidth
decode  batch    8 ctx   1024 graphs on :      3.00 ms/step    2666.7 tok/s | read 4.056 GB weights + 0.012 GB cache | 1352.0 GB/s = 32% of copy bandwidth
decode  batch   64 ctx   1024 graphs on :      8.80 ms/step    7272.7 tok/s | read 12.380 GB weights + 0.093 GB cache | 1417.4 GB/s = 33% of copy bandwidth
""",
    "bench-prefill-v4-flash-L4.log": """\
prefill batch    1 ctx   2048:    242.35 ms/step    8450.7 tok/s | ~28961.1 GFLOP/s (2 x active params)
        = 3.5% of the cuBLAS bf16 peak measured in this run (832 TFLOP/s)
""",
    "peer-v4-flash-L4.log": """\
peer decode batch   1 ctx 1024:     38.91 ms/step      25.7 tok/s
peer json {"model": "m", "context": 1024, "decode": [{"batch": 1, "ms_per_step": 38.9, "tokens_per_s": 25.7}, {"batch": 64, "ms_per_step": 44.39, "tokens_per_s": 1441.8}], "prefill": {"tokens": 2048, "ms": 89.6, "tokens_per_s": 22860.3}}
""",
    "bench_attention_decode.log": """\
 batch  splits   flushed us     hot us    MB/step      GB/s  anchor us  ours/anchor
     1      10        21.57      18.43       0.48        22       14.5         1.49
    64       2        62.11      60.27      30.70       494       45.0         1.20
""",
    "gpu.txt": "NVIDIA H200\n",
    "bench_kernels_cuda.log": """\
V4.1 mxfp4 il routed w1 x384 b64 wg_gemm 235 experts N2304 K5120          2651.4 GB/s          555.5  copy 4234 GB/s                        0.63
V4 mxfp4 il routed w2 x256 b64 wg_gemm 198 experts N4096 K2048          2558.4 GB/s          344.9  copy 4234 GB/s                        0.60
V4 mxfp4 il routed w2 x256 b64 wg_gemm ring 198 experts N4096 K2048          2947.9 GB/s          299.3  copy 4235 GB/s                        0.70
V4.1 mxfp4 il routed w1 x384 b1 wg_gemm 6 experts N2304 K5120            1770.3 GB/s           21.2  copy 4234 GB/s                        0.42
""",
}


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def main():
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as d:
        for name, text in LOGS.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        r = run(d)
        out = r.stdout
        check(r.returncode == 0, f"exit status {r.returncode}: {r.stderr}")
        check("v41-flash-L4 decode b1, graphs: 28% of the copy-bandwidth roofline; target >= 50%: 0.56 of it (not met)" in out, "b1 roofline line")
        check("decode b1 (graphs): 456.2 / 25.7 tok/s = 17.8x; target >= 10x: 1.78 of it (MET)" in out, "b1 peer line")
        check("decode b64 (graphs): 7107.2 / 1441.8 tok/s = 4.9x; target >= 10x: 0.49 of it (not met); "
              "needs <= 4.44 ms/step = 67% of the copy bandwidth (now 33%)" in out, "b64 peer line")
        check("prefill 2048 tokens: 8451 / 22860 tok/s = 0.37x" in out, "prefill peer line")
        check("v4-flash-L4 prefill 2048: 3.5% of the bf16 peak" in out, "prefill MFU line")
        check("b1 1.49x, b64 1.20x; target <= 1.25x: met at 1 of 2" in out, "attention line")
        check("routed MXFP4 experts on wg_gemm, b64: 0.60-0.63 of the copy bandwidth" in out, "routed line")
        check("routed MXFP4 experts on wg_gemm ring, b64: 0.70-0.70 of the copy bandwidth" in out,
              "the ring's rows apart from the register path's")
        check("CUDA graphs vs eager, ms/step: b1 2.34 / 2.89, b64 11.62 / 11.93" in out, "graphs line")
        # The baseline's steps this build also ran (b8 only in the baseline: left out).
        check("v4-flash-L4 this build / the baseline build (same call), ms/step: b1 graphs 2.19 / "
              "2.25 (-2.7%), b64 graphs 9.01 / 8.80 (+2.4%)" in out, "baseline A/B line")
        check("v41-flash-L4 this build / the baseline" not in out, "no baseline log, no A/B line")
        check("(on the H200) ==" in out, "the card named")
        # Another card (the device tool may lend an H100): figures, but no MET / not met.
        with open(os.path.join(d, "gpu.txt"), "w") as f:
            f.write("NVIDIA H100 80GB HBM3\n")
        other = run(d).stdout
        check("(on NVIDIA H100 80GB HBM3) ==" in other, "the other card named")
        check("MET" not in other and "not met" not in other, "no verdict on another card")
        check("0.56 of it (would not be met -- measured on NVIDIA H100 80GB HBM3, not the H200 "
              "the target is for)" in other, "the other card's b1 line")
        os.remove(os.path.join(d, "gpu.txt"))
        check("on an unknown card (no gpu.txt)" in run(d).stdout, "no card file")
        os.remove(os.path.join(d, "peer-v4-flash-L4.log"))
        check("peer comparison: not measured" in run(d).stdout, "missing peer log")
    with tempfile.TemporaryDirectory() as empty:
        out = run(empty).stdout
        check("v41-flash-L4 decode b1: not measured" in out, "empty directory")
    r = run("/nonexistent/logs")
    check(r.returncode != 0 and "usage" in r.stderr, "bad directory refused")
    for f in failures:
        print("FAILED:", f)
    if failures:
        print(run(os.path.dirname(SCRIPT)).stdout)
        sys.exit(1)
    print("acceptance-summary: all checks passed")


if __name__ == "__main__":
    main()
