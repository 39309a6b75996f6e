#!/usr/bin/env python3
"""The peer side of issue 5's comparison: transformers' DeepseekV4ForCausalLM (bf16, FP8/FP4
weights dequantized at load through FineGrainedFP8Config(dequantize=True)) on the same
checkpoint and GPU as `deepinfer bench`: decode tokens/s at the given batch sizes after a
prompt of --context tokens (median of timed one-token steps with the model's KV cache), and
prefill tokens/s of one --prefill-token prompt. Prints one line per figure and a JSON line.

  python3 bench/peer/transformers_v4.py --model DIR [--batch 1,64] [--context 512]
      [--prefill 2048] [--steps 8]
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


@torch.inference_mode()
def decode_tps(model, batch, context, steps, vocab):
    gen = torch.Generator().manual_seed(1234)
    out = model(input_ids=random_ids(gen, batch, context, vocab), use_cache=True)
    cache = out.past_key_values
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
    a = p.parse_args()
    model = load(a.model)
    vocab = model.config.vocab_size
    result = {"model": a.model, "context": a.context, "decode": [], "prefill": None}
    for b in [int(x) for x in a.batch.split(",")]:
        try:
            ms, tps = decode_tps(model, b, a.context, a.steps, vocab)
            print(f"peer decode batch {b:>3} ctx {a.context}: {ms:9.2f} ms/step {tps:9.1f} tok/s",
                  flush=True)
            result["decode"].append({"batch": b, "ms_per_step": ms, "tokens_per_s": tps})
        except Exception as e:  # report and go on: one figure failing must not hide the rest
            print(f"peer decode batch {b}: failed: {e!r}", flush=True)
    try:
        ms, tps = prefill_tps(model, a.prefill, vocab)
        print(f"peer prefill {a.prefill} tokens: {ms:9.2f} ms {tps:9.1f} tok/s", flush=True)
        result["prefill"] = {"tokens": a.prefill, "ms": ms, "tokens_per_s": tps}
    except Exception as e:
        print(f"peer prefill: failed: {e!r}", flush=True)
    print("peer json " + json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
