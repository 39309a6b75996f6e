#!/usr/bin/env python3
"""The peer side of issue 5's comparison: transformers' DeepseekV4ForCausalLM (bf16, FP8/FP4
weights dequantized at load through FineGrainedFP8Config(dequantize=True)) on the same
checkpoint and GPU as `deepinfer bench`: decode tokens/s at the given batch sizes after a
prompt of --context tokens (median of timed one-token steps with the model's KV cache), and
prefill tokens/s of one --prefill-token prompt. Prints one line per figure and a JSON line.
A decode batch's prompt is fed in chunks of --setup-chunk tokens, keeping only the last
position's logits (batch 64 x 1024 tokens at once ran out of memory on the H200).

  python3 bench/peer/transformers_v4.py --model DIR [--batch 1,64] [--context 512]
      [--prefill 2048] [--steps 8] [--setup-chunk 256]
"""
import argparse
import json
import statistics
import sys
import time

import torch


def load(path):
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config

    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(
        path,
        dtype=torch.bfloat16,
        quantization_config=FineGrainedFP8Config(dequantize=True),
        device_map="cuda",
    )
    model.eval()
    print(f"peer: loaded {type(model).__name__} in {time.time() - t0:.1f} s", flush=True)
    return model


def random_ids(gen, batch, n, vocab):
    return torch.randint(3, min(vocab, 128000), (batch, n), generator=gen).cuda()


def forward(model, **kw):
    """model(**kw) keeping the logits of the last position only where the model supports it
    (the full [batch, tokens, vocab] logits of a batch-64 prompt alone take ~16 GiB)."""
    try:
        return model(logits_to_keep=1, **kw)
    except TypeError as e:
        if "logits_to_keep" not in str(e):
            raise
        return model(**kw)


def build_cache(model, ids, chunk):
    """The KV cache after the prompt `ids` [batch, n]: fed in chunks of `chunk` tokens (all at
    once when chunk <= 0 or the prompt is shorter), so that a batch-64 prompt fits in memory.
    Only the decode steps after it are timed."""
    if chunk <= 0 or ids.shape[1] <= chunk:
        return forward(model, input_ids=ids, use_cache=True).past_key_values
    cache = None
    for start in range(0, ids.shape[1], chunk):
        out = forward(model, input_ids=ids[:, start:start + chunk], past_key_values=cache,
                      use_cache=True)
        cache = out.past_key_values
    return cache


@torch.inference_mode()
def decode_tps(model, batch, context, steps, vocab, chunk):
    gen = torch.Generator().manual_seed(1234)
    cache = build_cache(model, random_ids(gen, batch, context, vocab), chunk)
    times = []
    for s in range(steps + 1):
        ids = random_ids(gen, batch, 1, vocab)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        torch.cuda.synchronize()
        if s > 0:
            times.append(time.perf_counter() - t0)
        cache = out.past_key_values
    ms = statistics.median(times) * 1e3
    return ms, batch / (ms * 1e-3)


@torch.inference_mode()
def prefill_tps(model, tokens, vocab):
    gen = torch.Generator().manual_seed(4321)
    times = []
    for _ in range(3):
        ids = random_ids(gen, 1, tokens, vocab)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(input_ids=ids, use_cache=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times[1:]) * 1e3
    return ms, tokens / (ms * 1e-3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--batch", default="1,64")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--prefill", type=int, default=2048)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--setup-chunk", type=int, default=256,
                   help="prompt tokens per forward when building a decode cache (0: all at once)")
    a = p.parse_args()
    model = load(a.model)
    vocab = model.config.vocab_size
    result = {"model": a.model, "context": a.context, "decode": [], "prefill": None}
    for b in [int(x) for x in a.batch.split(",")]:
        try:
            ms, tps = decode_tps(model, b, a.context, a.steps, vocab, a.setup_chunk)
            print(f"peer decode batch {b:>3} ctx {a.context}: {ms:9.2f} ms/step {tps:9.1f} tok/s",
                  flush=True)
            result["decode"].append({"batch": b, "ms_per_step": ms, "tokens_per_s": tps})
        except Exception as e:  # report and go on: one figure failing must not hide the rest
            print(f"peer decode batch {b}: failed: {e!r}", flush=True)
            torch.cuda.empty_cache()
    try:
        ms, tps = prefill_tps(model, a.prefill, vocab)
        print(f"peer prefill {a.prefill} tokens: {ms:9.2f} ms {tps:9.1f} tok/s", flush=True)
        result["prefill"] = {"tokens": a.prefill, "ms": ms, "tokens_per_s": tps}
    except Exception as e:
        print(f"peer prefill: failed: {e!r}", flush=True)
    print("peer json " + json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
