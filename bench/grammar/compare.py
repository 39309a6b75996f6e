#!/usr/bin/env python3
"""Side-by-side token-mask benchmark: deepinfer vs xgrammar vs llguidance (both from PyPI).

Runs `deepinfer grammar bench --json --tokens-out T` on a JSONL of JSON Schemas
(jsonschemabench rows: {"id", "schema", "tests": [{"data", "valid"}]}); deepinfer writes the
token sequences it fed (valid instances serialized in the grammar's key order, tokenized with
the same tokenizer). This script then feeds exactly those sequences to xgrammar and
llguidance, timing compilation and the mask computation before every token (and once after
the last), and prints the three engines side by side.

    pip install xgrammar llguidance transformers
    python3 bench/grammar/compare.py --deepinfer build/bin/deepinfer \
        --tokenizer assets/deepseek-v3-tokenizer \
        --schemas ../shared/testdata/jsonschema/jsonschemabench_public.jsonl
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def stats(v):
    if not v:
        return {"n": 0, "mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    a = np.sort(np.asarray(v, dtype=np.float64))
    return {"n": len(a), "mean": float(a.mean()), "p50": float(a[len(a) // 2]),
            "p99": float(a[min(len(a) - 1, int(len(a) * 0.99))]), "max": float(a[-1])}


def run_ours(args, tokens_path):
    cmd = [args.deepinfer, "grammar", "bench", "--tokenizer", args.tokenizer, "--schemas", args.schemas,
           "--json", "--tokens-out", tokens_path, "--max-instances", str(args.max_instances)]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    if args.precompute:
        cmd += ["--precompute"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def load_hf(tokenizer_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tokenizer_dir)


def bench_xgrammar(hf, rows):
    import xgrammar as xgr
    info = xgr.TokenizerInfo.from_huggingface(hf)
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    compile_us, mask_us, refused, failed = [], [], 0, 0
    bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
    for row in rows:
        t0 = time.perf_counter()
        try:
            cg = compiler.compile_json_schema(row["schema"], any_whitespace=True, strict_mode=False)
        except Exception:  # noqa: BLE001 - a schema xgrammar refuses
            failed += 1
            continue
        compile_us.append((time.perf_counter() - t0) * 1e6)
        for seq in row["tokens"]:
            m = xgr.GrammarMatcher(cg)
            ok = True
            for tid in seq:
                t0 = time.perf_counter()
                m.fill_next_token_bitmask(bitmask)
                mask_us.append((time.perf_counter() - t0) * 1e6)
                if not m.accept_token(tid):
                    ok = False
                    break
            if ok:
                t0 = time.perf_counter()
                m.fill_next_token_bitmask(bitmask)
                mask_us.append((time.perf_counter() - t0) * 1e6)
            else:
                refused += 1
    return {"engine": "xgrammar", "compiled": len(compile_us), "failed": failed, "refused_sequences": refused,
            "compile_us": stats(compile_us), "mask_us": stats(mask_us)}


def bench_llguidance(hf, rows):
    import llguidance
    import llguidance.hf
    import llguidance.numpy as lln
    tok = llguidance.hf.from_tokenizer(hf)
    compile_us, mask_us, refused, failed = [], [], 0, 0
    bitmask = lln.allocate_token_bitmask(1, tok.vocab_size)
    for row in rows:
        t0 = time.perf_counter()
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            row["schema"], defaults={"whitespace_flexible": True})
        probe = llguidance.LLMatcher(tok, grammar)
        if probe.is_error():
            failed += 1
            continue
        compile_us.append((time.perf_counter() - t0) * 1e6)
        for seq in row["tokens"]:
            m = llguidance.LLMatcher(tok, grammar)
            ok = True
            for tid in seq:
                t0 = time.perf_counter()
                lln.fill_next_token_bitmask(m, bitmask, 0)
                mask_us.append((time.perf_counter() - t0) * 1e6)
                if not m.consume_token(tid):
                    ok = False
                    break
            if ok:
                t0 = time.perf_counter()
                lln.fill_next_token_bitmask(m, bitmask, 0)
                mask_us.append((time.perf_counter() - t0) * 1e6)
            else:
                refused += 1
    return {"engine": "llguidance", "compiled": len(compile_us), "failed": failed, "refused_sequences": refused,
            "compile_us": stats(compile_us), "mask_us": stats(mask_us)}


def print_table(results):
    print(f"{'engine':<12}{'compiled':>9}{'compile ms mean/p50/p99':>28}"
          f"{'mask us mean':>14}{'p50':>8}{'p99':>10}{'max':>11}{'steps':>8}")
    for r in results:
        c, m = r["compile_us"], r["mask_us"]
        print(f"{r['engine']:<12}{r['compiled']:>9}"
              f"{c['mean'] / 1e3:>10.2f}/{c['p50'] / 1e3:.2f}/{c['p99'] / 1e3:<9.2f}"
              f"{m['mean']:>14.1f}{m['p50']:>8.1f}{m['p99']:>10.1f}{m['max']:>11.1f}{m['n']:>8}")
    ours = results[0]["mask_us"]
    for r in results[1:]:
        if r["mask_us"]["n"]:
            print(f"mean mask time, deepinfer / {r['engine']}: {ours['mean'] / r['mask_us']['mean']:.3f}")
    print(f"deepinfer p99 / 1 ms goal: {ours['p99'] / 1000:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deepinfer", default="build/bin/deepinfer")
    ap.add_argument("--tokenizer", default="assets/deepseek-v3-tokenizer")
    ap.add_argument("--schemas", default="../shared/testdata/jsonschema/jsonschemabench_public.jsonl")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--max-instances", type=int, default=4)
    ap.add_argument("--lazy", dest="precompute", action="store_false",
                    help="deepinfer classifies each state on first use instead of at compile time (the default, "
                         "like xgrammar's mask cache, is at compile time: its compile times include it)")
    ap.add_argument("--json", help="also write all results to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tokens_path = os.path.join(tmp, "tokens.jsonl")
        ours = run_ours(args, tokens_path)
        with open(tokens_path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    hf = load_hf(args.tokenizer)
    results = [ours, bench_xgrammar(hf, rows), bench_llguidance(hf, rows)]
    print(f"{len(rows)} schemas with token sequences, {sum(len(r['tokens']) for r in rows)} sequences, "
          f"{ours['compiled']}/{ours['schemas']} schemas compiled by deepinfer")
    print_table(results)
    for r in results[1:]:
        print(f"{r['engine']}: {r['failed']} schemas refused, {r['refused_sequences']} sequences refused")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
