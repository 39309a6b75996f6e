#!/usr/bin/env python3
# Merges the benchmark runs into one table (best and median MB/s over all interleaved passes,
# by wall clock and by process CPU time; ratios to the faster HF mode) and checks that every
# engine's ids equal HF's on every document. Writes OUT_DIR/summary.json.
# Usage: report.py OUT_DIR CORPUS  (reads OUT_DIR/<engine>.round*.json and OUT_DIR/<engine>.ids)
import glob
import json
import os
import struct
import sys

out_dir, corpus = sys.argv[1], sys.argv[2]
engines = ["deepinfer", "deepinfer-pcre2", "hf-encode", "hf-batch"]
hf_engines = ["hf-encode", "hf-batch"]


def read_ids(path):
    data = open(path, "rb").read()
    docs, at = [], 0
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        docs.append(list(struct.unpack_from(f"<{n}i", data, at + 4)))
        at += 4 + 4 * n
    return docs


def best(v):
    return max(v)


def median(v):
    return sorted(v)[len(v) // 2]


runs = {}  # engine -> {"mb_per_s": [...], "cpu_mb_per_s": [...]}
meta = {}
for e in engines:
    for f in sorted(glob.glob(os.path.join(out_dir, f"{e}.round*.json"))):
        s = json.load(open(f))
        for key in ("mb_per_s", "cpu_mb_per_s"):
            runs.setdefault(e, {}).setdefault(key, []).extend(s[key])
        meta[e] = s

texts = [json.loads(l)["text"] for l in open(corpus, encoding="utf-8")]
reference = read_ids(os.path.join(out_dir, "hf-encode.ids"))
matching = {}
for e in ["deepinfer", "deepinfer-pcre2", "hf-batch"]:
    got = read_ids(os.path.join(out_dir, f"{e}.ids"))
    bad = [i for i in range(len(reference)) if i >= len(got) or got[i] != reference[i]]
    matching[e] = len(reference) - len(bad)
    for i in bad[:3]:
        print(f"MISMATCH {e} doc {i}: {texts[i][:120]!r}")

# The HF reference for each statistic is the faster of its two modes.
hf = {(key, stat.__name__): max(stat(runs[h][key]) for h in hf_engines)
      for key in ("mb_per_s", "cpu_mb_per_s") for stat in (best, median)}
s = meta["hf-encode"]
print(f"\ncorpus: {s['documents']} documents, {s['bytes'] / 1e6:.2f} MB, {s['tokens']} tokens "
      f"({s['bytes'] / s['tokens']:.2f} bytes/token); one thread; "
      f"{len(runs['hf-encode']['mb_per_s'])} timed passes per engine")
header = f"{'engine':16s} {'wall best':>10s} {'wall med':>9s} {'cpu best':>9s} {'cpu med':>8s}"
print(header + f" {'x HF (wall med)':>16s} {'x HF (cpu med)':>15s} {'ids == HF':>11s}")
table = []
for e in engines:
    row = {"engine": e}
    for key in ("mb_per_s", "cpu_mb_per_s"):
        for stat in (best, median):
            row[f"{stat.__name__}_{key}"] = stat(runs[e][key])
            row[f"{stat.__name__}_{key}_x_hf"] = stat(runs[e][key]) / hf[(key, stat.__name__)]
    row["docs_matching_hf"] = matching.get(e, len(reference))
    ok = "reference" if e == "hf-encode" else f"{matching[e]}/{len(reference)}"
    print(f"{e:16s} {row['best_mb_per_s']:10.2f} {row['median_mb_per_s']:9.2f} "
          f"{row['best_cpu_mb_per_s']:9.2f} {row['median_cpu_mb_per_s']:8.2f} "
          f"{row['median_mb_per_s_x_hf']:15.2f}x {row['median_cpu_mb_per_s_x_hf']:14.2f}x {ok:>11s}")
    table.append(row)
json.dump({"corpus_bytes": s["bytes"], "documents": s["documents"], "tokens": s["tokens"],
           "results": table}, open(os.path.join(out_dir, "summary.json"), "w"), indent=2)
print("MB/s = 1e6 bytes of UTF-8 input per second; x HF = against the faster of hf-encode and "
      "hf-batch for the same statistic")
all_ok = all(v == len(reference) for v in matching.values())
print("ids check:", "PASS" if all_ok else "FAIL")
sys.exit(0 if all_ok else 1)
