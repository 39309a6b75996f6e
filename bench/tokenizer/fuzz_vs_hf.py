#!/usr/bin/env python3
# Random strings over an alphabet of tricky characters (every kind of space, digits of many
# scripts, marks, kana/CJK range edges, emoji and letters newer than Unicode 14, special-token
# fragments) encoded by our bench binary (both pre-tokenizer engines) and by HF tokenizers;
# prints the first differences and exits 1 if any.
# Usage: fuzz_vs_hf.py BENCH_BINARY TOKENIZER_DIR OUT_DIR [NUM_CASES]
import json
import os
import random
import struct
import subprocess
import sys

os.environ["RAYON_NUM_THREADS"] = "1"
from tokenizers import Tokenizer  # noqa: E402

binary, tokenizer_dir, out_dir = sys.argv[1:4]
num_cases = int(sys.argv[4]) if len(sys.argv) > 4 else 5000
alphabet = ["a", "Z", "é", " ", "  ", "\t", "\r", "\n", "\r\n", "\u0085", "\u00a0", "\u2028", "\u3000",
            "\u000b", "1", "42", "²", "Ⅳ", "٣", "৪", "\u0301", "\u093e", ".", "'", "'s", "-", "(",
            "$", "+", "—", "…", "一", "龥", "龦", "\u3040", "゛", "゠", "・", "ー", "〇", "カ", "😀",
            "👩‍💻", "\u200d", "\ufe0f", "\x00", "\x01", "\x7f", "Ж", "α", "_", "`", "~", "，",
            "\U00020000", "\U000E0100", "\U000F0000", "\U0001FAE8", "\U00031350", "\U0001CC00",
            "<｜User｜>", "<|EOT|>", "<｜tool▁sep｜>", "<｜end▁of▁sentence｜>", "<", "｜", "▁"]
rng = random.Random(1234)
cases = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(num_cases)]
cases_path = os.path.join(out_dir, "fuzz_cases.jsonl")
with open(cases_path, "w", encoding="utf-8") as f:
    for c in cases:
        f.write(json.dumps({"text": c}) + "\n")


def read_ids(path):
    data, docs, at = open(path, "rb").read(), [], 0
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        docs.append(list(struct.unpack_from(f"<{n}i", data, at + 4)))
        at += 4 + 4 * n
    return docs


hf = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
expected = [e.ids for e in hf.encode_batch(cases, add_special_tokens=False)]
num_bad = 0
for flags in ([], ["--pcre2"]):
    ids_path = os.path.join(out_dir, "fuzz_ids.bin")
    subprocess.run([binary, "--tokenizer", tokenizer_dir, "--corpus", cases_path, "--repeat", "1",
                    "--ids-out", ids_path, *flags], check=True, stdout=subprocess.DEVNULL)
    got = read_ids(ids_path)
    bad = [i for i in range(len(cases)) if got[i] != expected[i]]
    num_bad += len(bad)
    for i in bad[:5]:
        print(f"DIFF {flags}: {cases[i]!r}\n  ours {got[i]}\n  hf   {expected[i]}")
    print(f"fuzz vs HF {' '.join(flags) or '(fast pre-tokenizer)'}: "
          f"{len(cases) - len(bad)}/{len(cases)} random strings give HF's ids")
sys.exit(1 if num_bad else 0)
