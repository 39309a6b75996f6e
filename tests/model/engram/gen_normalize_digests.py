#!/usr/bin/env python3
# Writes fixtures/normalize_digests.txt: per block of 4096 code points, an FNV-1a 64 digest
# of the reference normalizer's output for every code point alone (UTF-8, each followed by
# a 0xFF byte; surrogates skipped). The normalizer is the one of the official
# build_compressed_token_map, run by HF tokenizers (pip install tokenizers; 0.23.3 here).
import pathlib

from tokenizers import Regex, normalizers

BLOCK = 4096
SENTINEL = "\ue000"
NORMALIZER = normalizers.Sequence([
    normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
    normalizers.Replace(Regex(r"[ \t\r\n]+"), " "), normalizers.Replace(Regex(r"^ $"), SENTINEL),
    normalizers.Strip(), normalizers.Replace(SENTINEL, " "),
])


def fnv1a(data: bytes, h: int) -> int:
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main() -> None:
    lines = []
    for start in range(0, 0x110000, BLOCK):
        h = 0xCBF29CE484222325
        for cp in range(start, start + BLOCK):
            if 0xD800 <= cp < 0xE000:
                continue
            h = fnv1a(NORMALIZER.normalize_str(chr(cp)).encode() + b"\xff", h)
        lines.append(f"{start:06x} {h:016x}")
    out = pathlib.Path(__file__).parent / "fixtures" / "normalize_digests.txt"
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
