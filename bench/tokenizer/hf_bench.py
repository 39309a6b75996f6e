#!/usr/bin/env python3
# Hugging Face `tokenizers` on the same corpus and tokenizer.json, forced to one thread:
#   encode  - Tokenizer.encode(text, add_special_tokens=False) per document (a Python loop;
#             its overhead is a few microseconds per document of ~6 KB)
#   batch   - Tokenizer.encode_batch(all documents) with RAYON_NUM_THREADS=1
# Each repetition loads a fresh Tokenizer (untimed) so its word cache starts cold, as ours does.
# Usage: hf_bench.py TOKENIZER_JSON CORPUS --mode encode|batch --repeat N --json-out F [--ids-out F]
import argparse
import json
import os
import struct
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402  (after the thread settings)

ap = argparse.ArgumentParser()
ap.add_argument("tokenizer_json")
ap.add_argument("corpus")
ap.add_argument("--mode", choices=["encode", "batch"], default="encode")
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--json-out", required=True)
ap.add_argument("--ids-out")
args = ap.parse_args()

docs = [json.loads(l)["text"] for l in open(args.corpus, encoding="utf-8")]
num_bytes = sum(len(d.encode()) for d in docs)
rates, cpu_rates = [], []  # wall clock, and process CPU time (robust to others' load)
ids = None
for r in range(args.repeat):
    tok = Tokenizer.from_file(args.tokenizer_json)
    start, cpu_start = time.perf_counter(), time.process_time()
    if args.mode == "encode":
        ids = [tok.encode(d, add_special_tokens=False).ids for d in docs]
    else:
        ids = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    rates.append(num_bytes / 1e6 / seconds)
    cpu_rates.append(num_bytes / 1e6 / cpu_seconds)
    print(f"hf-{args.mode} rep {r}: {rates[-1]:.2f} MB/s ({seconds:.3f} s wall, {cpu_seconds:.3f} s cpu)",
          flush=True)

summary = {"engine": f"hf-{args.mode}", "documents": len(docs), "bytes": num_bytes,
           "tokens": sum(len(i) for i in ids), "mb_per_s": rates, "cpu_mb_per_s": cpu_rates,
           "best_mb_per_s": max(rates), "median_mb_per_s": sorted(rates)[len(rates) // 2]}
json.dump(summary, open(args.json_out, "w"), indent=2)
if args.ids_out:
    with open(args.ids_out, "wb") as f:
        for doc in ids:
            f.write(struct.pack(f"<I{len(doc)}i", len(doc), *doc))
