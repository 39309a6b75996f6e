#!/usr/bin/env python3
"""Issue 5's acceptance figures from one device call's logs (scripts/gpu-forward.sh's $OUT, or
the directory scripts/gpu-call.sh packs into logs.tgz): each measured figure beside its target
and the ratio to it, so that a call's result reads off without arithmetic by hand.

Usage: scripts/acceptance-summary.py LOG_DIR

Reads whichever of these are there (a missing one is reported as not measured):
  bench-decode-<preset>.log, bench-prefill-<preset>.log  (deepinfer bench ... --device cuda)
  bench-decode-base-<preset>.log  (a bundled baseline build's decode in the same call: each
                                   common step beside this build's, as a same-call A/B)
  peer-v4-flash-L4.log                                   (bench/peer/transformers_v4.py)
  gpu.txt                                                (nvidia-smi's card name: the targets are
                                                          the H200's; on another card each verdict
                                                          says so instead of MET / not met)
  bench_attention_decode.log, bench_kernels_cuda.log     (the per-kernel benchmarks)
"""
import json
import os
import re
import sys

DECODE = re.compile(r"^decode\s+batch\s+(\d+)\s+ctx\s+(\d+)\s+graphs (on|off)\s*:\s+([\d.]+) ms/step\s+"
                    r"([\d.]+) tok/s .*= (\d+)% of copy bandwidth")
PREFILL_MS = re.compile(r"^prefill\s+batch\s+\d+\s+ctx\s+(\d+):\s+([\d.]+) ms/step\s+([\d.]+) tok/s")
PREFILL_PEAK = re.compile(r"= ([\d.]+)% of the cuBLAS bf16 peak")
ATTENTION = re.compile(r"^\s*(\d+)\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\d+\s+[\d.]+\s+([\d.]+)\s*$")
ROUTED = re.compile(r"^(V4\.1|V4) mxfp4 il routed (w\d) x\d+ b(\d+) (.+?) \d+ experts .* ([\d.]+)\s*$")

B1_ROOFLINE_TARGET = 50.0   # % of the copy bandwidth, v41-flash-L4 batch 1
PEER_TARGET = 10.0          # x transformers' decode tokens/s at batch 1 and 64
ATTENTION_TARGET = 1.25     # x FlashMLA's time
DEEPGEMM_GROUPED = (0.92, 0.98)  # share of copy, DeepGEMM's FP8 grouped GEMMs


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return None


def decode_rows(lines):
    rows = {}
    for line in lines or []:
        m = DECODE.match(line)
        if m:
            rows[(int(m[1]), m[3] == "on")] = (float(m[4]), float(m[5]), int(m[6]))
    return rows


CARD = "the H200"  # set by main from gpu.txt: the card the figures were measured on


def verdict(ratio):
    if CARD != "the H200":  # the targets are for the H200 (its copy bandwidth)
        return ("would be met" if ratio >= 1.0 else "would not be met") + \
            f" -- measured on {CARD}, not the H200 the target is for"
    return "MET" if ratio >= 1.0 else "not met"


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: acceptance-summary.py LOG_DIR (the logs of one scripts/gpu-forward.sh run)")
    d = sys.argv[1]
    global CARD
    card = (read(os.path.join(d, "gpu.txt")) or [""])[0].strip()
    CARD = "the H200" if "H200" in card else (card or "an unknown card (no gpu.txt)")
    out = ["== issue 5 acceptance, from the logs in " + d + f" (on {CARD}) =="]

    decode = {preset: decode_rows(read(os.path.join(d, f"bench-decode-{preset}.log")))
              for preset in ("v41-flash-L4", "v4-flash-L4")}
    v41 = decode["v41-flash-L4"]
    if (1, True) in v41:
        share = v41[(1, True)][2]
        out.append(f"v41-flash-L4 decode b1, graphs: {share}% of the copy-bandwidth roofline; target "
                   f">= {B1_ROOFLINE_TARGET:.0f}%: {share / B1_ROOFLINE_TARGET:.2f} of it ({verdict(share / B1_ROOFLINE_TARGET)})")
    else:
        out.append("v41-flash-L4 decode b1: not measured in these logs")
    for preset in ("v41-flash-L4", "v4-flash-L4"):
        rows = decode[preset]
        if (64, True) in rows:
            out.append(f"{preset} decode b64, graphs: {rows[(64, True)][2]}% of the roofline (reported)")
        pairs = [(b, rows[(b, True)][0], rows[(b, False)][0]) for b in sorted({b for b, _ in rows})
                 if (b, True) in rows and (b, False) in rows]
        if pairs:
            out.append(f"{preset} CUDA graphs vs eager, ms/step: " +
                       ", ".join(f"b{b} {on:.2f} / {off:.2f}" for b, on, off in pairs))

    for preset in ("v41-flash-L4", "v4-flash-L4"):
        base = decode_rows(read(os.path.join(d, f"bench-decode-base-{preset}.log")))
        ours = decode[preset]
        common = sorted((k for k in ours if k in base), key=lambda k: (not k[1], k[0]))
        if common:
            out.append(f"{preset} this build / the baseline build (same call), ms/step: " +
                       ", ".join(f"b{b} {'graphs' if g else 'eager'} {ours[(b, g)][0]:.2f} / "
                                 f"{base[(b, g)][0]:.2f} ({(ours[(b, g)][0] / base[(b, g)][0] - 1) * 100:+.1f}%)"
                                 for b, g in common))

    v4 = decode["v4-flash-L4"]
    peer_lines = read(os.path.join(d, "peer-v4-flash-L4.log")) or []
    peer = None
    for line in peer_lines:
        if line.startswith("peer json "):
            peer = json.loads(line[len("peer json "):])
    if peer and v4:
        for entry in peer.get("decode", []):
            b = int(entry["batch"])
            for graphs in (True, False):
                if (b, graphs) not in v4:
                    continue
                ms, ours, share = v4[(b, graphs)]
                x = ours / entry["tokens_per_s"]
                line = (f"v4-flash-L4 vs transformers, decode b{b} ({'graphs' if graphs else 'eager'}): "
                        f"{ours:.1f} / {entry['tokens_per_s']:.1f} tok/s = {x:.1f}x; target >= "
                        f"{PEER_TARGET:.0f}x: {x / PEER_TARGET:.2f} of it ({verdict(x / PEER_TARGET)})")
                if x < PEER_TARGET:  # the step the target asks for, and its share of the roofline
                    line += (f"; needs <= {ms * x / PEER_TARGET:.2f} ms/step = "
                             f"{share * PEER_TARGET / x:.0f}% of the copy bandwidth (now {share}%)")
                out.append(line)
        prefill = read(os.path.join(d, "bench-prefill-v4-flash-L4.log")) or []
        for line in prefill:
            m = PREFILL_MS.match(line)
            if m and "prefill" in peer:
                x = float(m[3]) / peer["prefill"]["tokens_per_s"]
                out.append(f"v4-flash-L4 vs transformers, prefill {m[1]} tokens: {float(m[3]):.0f} / "
                           f"{peer['prefill']['tokens_per_s']:.0f} tok/s = {x:.2f}x (reported)")
    else:
        out.append("peer comparison: not measured in these logs (needs bench-decode-v4-flash-L4.log and "
                   "peer-v4-flash-L4.log)")

    for preset in ("v41-flash-L4", "v4-flash-L4"):
        for line in read(os.path.join(d, f"bench-prefill-{preset}.log")) or []:
            m = PREFILL_PEAK.search(line)
            if m:
                out.append(f"{preset} prefill 2048: {m[1]}% of the bf16 peak measured in the run "
                           f"(reported; project goal 70%)")

    att = []
    for line in read(os.path.join(d, "bench_attention_decode.log")) or []:
        m = ATTENTION.match(line)
        if m:
            att.append((int(m[1]), float(m[2])))
    if att:
        met = sum(r <= ATTENTION_TARGET for _, r in att)
        out.append("attention decode vs FlashMLA (time ratio): " +
                   ", ".join(f"b{b} {r:.2f}x" for b, r in att) +
                   f"; target <= {ATTENTION_TARGET}x: met at {met} of {len(att)}")

    routed = {}
    for line in read(os.path.join(d, "bench_kernels_cuda.log")) or []:
        m = ROUTED.match(line.rstrip())
        if m:
            routed.setdefault(m[4], []).append((f"{m[1]} {m[2]} b{m[3]}", float(m[5])))
    for kernel, rows in routed.items():
        b64 = [r for name, r in rows if name.endswith("b64")]
        if b64:
            out.append(f"routed MXFP4 experts on {kernel}, b64: {min(b64):.2f}-{max(b64):.2f} of the copy "
                       f"bandwidth; DeepGEMM's FP8 grouped GEMMs {DEEPGEMM_GROUPED[0]}-{DEEPGEMM_GROUPED[1]}: "
                       f"{min(b64) / DEEPGEMM_GROUPED[1]:.2f}-{max(b64) / DEEPGEMM_GROUPED[0]:.2f} of it")
    print("\n".join(out))


if __name__ == "__main__":
    main()
