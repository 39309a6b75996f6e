#!/usr/bin/env python3
# Builds the tokenizer benchmark corpus from material on this machine (no downloads), as JSON
# lines {"source": ..., "text": ...}, one document per line, shuffled with a fixed seed:
#   code   ~40%: C/C++ headers (/usr/include), Python modules (/usr/lib/python3*)
#   prose  ~25%: English READMEs/changelogs (/usr/share/doc), Python docstrings
#   multi  ~35%: gettext translations (/usr/share/locale: zh_CN, zh_TW, ja, ko, ru, ar, hi, th,
#                el, he, vi, de, fr, es, ...), translated man pages, the golden test texts
# Every file contributes at most one document (cut to 16 KB), so no paragraph repeats and a
# word cache only helps as much as it would on real traffic.
# Usage: make_corpus.py OUT.jsonl [TARGET_MB]
import ast
import glob
import gzip
import gettext
import json
import os
import random
import sys

out_path = sys.argv[1]
target_bytes = int(float(sys.argv[2] if len(sys.argv) > 2 else 12) * 1e6)
rng = random.Random(20261130)
MAX_DOC = 16000


def cut(text):
    return text[:MAX_DOC] if len(text) > MAX_DOC else text


def read_text(path):
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            return f.read(4 * MAX_DOC).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def sample_files(patterns, limit):
    files = sorted({f for p in patterns for f in glob.glob(p, recursive=True) if os.path.isfile(f)})
    rng.shuffle(files)
    return files[:limit]


def take(docs, source, texts, budget):
    used = 0
    for t in texts:
        if used >= budget:
            break
        if t and t.strip():
            t = cut(t)
            docs.append({"source": source, "text": t})
            used += len(t.encode())
    return used


def code_texts(patterns):
    for f in sample_files(patterns, 5000):
        yield read_text(f)


def docstrings():
    for f in sample_files(["/usr/lib/python3*/**/*.py"], 4000):
        src = read_text(f)
        if src is None:
            continue
        try:
            tree = ast.parse(src)
        except (SyntaxError, ValueError):
            continue
        parts = [ast.get_docstring(n) for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Module, ast.AsyncFunctionDef))]
        text = "\n\n".join(p for p in parts if p)
        if len(text) > 200:
            yield text


def translations(langs):
    files = []
    for lang in langs:
        files += sample_files([f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo"], 400)
    rng.shuffle(files)
    for f in files:
        try:
            with open(f, "rb") as fp:
                catalog = gettext.GNUTranslations(fp)._catalog
        except Exception:
            continue
        msgs = [v for k, v in catalog.items() if k and isinstance(v, str)]
        if msgs:
            yield "\n".join(msgs)


def man_pages():
    for f in sample_files([f"/usr/share/man/{l}/man*/*" for l in
                           ("ja", "ko", "zh_CN", "zh_TW", "ru", "de", "fr", "pl", "uk")], 2000):
        yield read_text(f)


def golden_texts():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    shared = os.environ.get("DEEPINFER_SHARED_DIR") or os.path.join(os.path.dirname(root), "shared")
    path = os.path.join(shared, "testdata/tokenizer/golden_public.jsonl")
    if os.path.exists(path):
        lines = [json.loads(l)["text"] for l in open(path, encoding="utf-8")]
        for i in range(0, len(lines), 40):
            yield "\n".join(lines[i:i + 40])


docs = []
mb = target_bytes / 12e6
sizes = {}
sizes["c/c++ headers"] = take(docs, "c/c++ headers",
                              code_texts(["/usr/include/**/*.h", "/usr/include/**/*.hpp"]), 2.6e6 * mb)
sizes["python source"] = take(docs, "python source", code_texts(["/usr/lib/python3*/**/*.py"]), 2.2e6 * mb)
sizes["english docs"] = take(docs, "english docs", code_texts(
    ["/usr/share/doc/**/README*", "/usr/share/doc/**/changelog*.gz", "/usr/share/doc/**/NEWS*"]), 1.8e6 * mb)
sizes["python docstrings"] = take(docs, "python docstrings", docstrings(), 1.2e6 * mb)
sizes["cjk translations"] = take(docs, "cjk translations",
                                 translations(["zh_CN", "zh_TW", "ja", "ko"]), 2.0e6 * mb)
sizes["other translations"] = take(docs, "other translations", translations(
    ["ru", "uk", "ar", "he", "hi", "th", "el", "vi", "de", "fr", "es", "pt_BR", "pl", "tr"]), 1.6e6 * mb)
sizes["man pages (ja/ko/zh/ru/...)"] = take(docs, "man pages", man_pages(), 0.5e6 * mb)
sizes["golden texts"] = take(docs, "golden texts", golden_texts(), 0.3e6 * mb)
rng.shuffle(docs)
with open(out_path, "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps(d, ensure_ascii=False) + "\n")
total = sum(sizes.values())
print(f"corpus: {len(docs)} documents, {total / 1e6:.2f} MB of UTF-8 text -> {out_path}")
for k, v in sizes.items():
    print(f"  {k:30s} {v / 1e6:6.2f} MB  ({100 * v / total:4.1f}%)")
