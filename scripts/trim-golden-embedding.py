#!/usr/bin/env python3
"""Copies a golden checkpoint folder with the embedding rows that no test token reads zeroed.

Usage: scripts/trim-golden-embedding.py SRC_DIR DST_DIR

The tests run prefill of `input_ids` and teacher-forced decode along the reference's greedy
paths (`greedy_ids`, `greedy_ids_noactq`; every I64 tensor of SRC_DIR/expected.safetensors whose
name is or ends in `ids` is kept), so every other row of `embed.weight` is never read and the
logits they compute are unchanged (the CPU golden tests give identical output on the copy). Zeroed rows compress to nothing: v4_public's 76 MB
checkpoint then fits, xz-compressed, into the 64 MiB a device call carries. The head is kept
whole (every logit is compared). Standard library only (the GPU machine's python has numpy,
this one may not).
"""
import json
import shutil
import struct
import sys
from pathlib import Path


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return n, json.loads(f.read(n))


def read_i64(path, name):
    n, h = header(path)
    t = h[name]
    if t["dtype"] != "I64":
        raise SystemExit(f"{path}: {name} is {t['dtype']}, expected I64")
    a, b = t["data_offsets"]
    with open(path, "rb") as f:
        f.seek(8 + n + a)
        raw = f.read(b - a)
    return list(struct.unpack(f"<{len(raw) // 8}q", raw))


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    expected = src / "expected.safetensors"
    for f in (expected, src / "model.safetensors"):
        if not f.is_file():
            raise SystemExit(f"trim-golden-embedding: {f} not found")
    _, eh = header(expected)
    def token_ids(name, meta):  # input_ids, greedy_ids, greedy_ids_noactq; not engram hash ids
        named = name == "ids" or name.endswith("_ids") or "_ids_" in name
        return meta["dtype"] == "I64" and named and "hash" not in name

    id_lists = [k for k, v in eh.items() if k != "__metadata__" and token_ids(k, v)]
    if "input_ids" not in id_lists:
        raise SystemExit(f"{expected}: no input_ids")
    keep = set()
    for name in id_lists:
        keep |= set(read_i64(expected, name))
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors"))
    model = src / "model.safetensors"
    n, h = header(model)
    emb = h.get("embed.weight")
    if emb is None or len(emb["shape"]) != 2:
        raise SystemExit(f"{model}: no 2-D embed.weight")
    rows, cols = emb["shape"]
    elem = {"BF16": 2, "F16": 2, "F32": 4}[emb["dtype"]]
    a, b = emb["data_offsets"]
    if b - a != rows * cols * elem:
        raise SystemExit(f"{model}: embed.weight holds {b - a} bytes, shape says {rows * cols * elem}")
    if any(i < 0 or i >= rows for i in keep):
        raise SystemExit(f"{expected}: token ids outside the {rows}-row embedding")
    row_bytes = cols * elem
    with open(model, "rb") as f, open(dst / "model.safetensors", "wb") as out:
        out.write(f.read(8 + n + a))  # header and the tensors before the embedding
        table = bytearray(f.read(b - a))
        zero = bytes(row_bytes)
        for r in range(rows):
            if r not in keep:
                table[r * row_bytes:(r + 1) * row_bytes] = zero
        out.write(table)
        shutil.copyfileobj(f, out)
    print(f"{dst}: kept {len(keep)} of {rows} embedding rows")


if __name__ == "__main__":
    main()
