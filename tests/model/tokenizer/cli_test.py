#!/usr/bin/env python3
# End-to-end test of `deepinfer tokenize` / `detokenize`: golden lines through the binary must
# give the golden ids and text; a malformed line must fail naming its line number.
# Usage: cli_test.py <deepinfer binary> <repository root>
import json
import os
import subprocess
import sys

binary, source_dir = sys.argv[1], sys.argv[2]
shared = os.environ.get("DEEPINFER_SHARED_DIR") or os.path.join(os.path.dirname(source_dir), "shared")
tokenizer = os.path.join(shared, "models/deepseek-v3-tokenizer")
golden = [json.loads(l) for l in open(os.path.join(shared, "testdata/tokenizer/golden_public.jsonl"))]
failures = []


def run(args, stdin):
    return subprocess.run([binary, *args, "--tokenizer", tokenizer], input=stdin.encode(),
                          capture_output=True)


def check(name, ok, detail=""):
    if not ok:
        failures.append(f"{name}: {detail}")


lines = golden[::7]  # a spread of categories, about 150 lines
text_in = "".join(json.dumps({"text": g["text"]}) + "\n" for g in lines)
for flag, field in [([], "ids"), (["--add-special-tokens"], "ids_add_special"),
                    (["--add-bos"], "ids_bos_transformers")]:
    r = run(["tokenize", *flag], text_in)
    check(f"tokenize {flag} exit", r.returncode == 0, r.stderr.decode())
    got = [json.loads(l)["ids"] for l in r.stdout.decode().split("\n")[:-1]]
    check(f"tokenize {flag} ids", got == [g[field] for g in lines], "ids differ")

ids_in = "".join(json.dumps({"ids": g["ids"]}) + "\n" for g in lines)
for flag, field in [([], "decoded"), (["--skip-special-tokens"], "decoded_skip_special")]:
    r = run(["detokenize", *flag], ids_in)
    check(f"detokenize {flag} exit", r.returncode == 0, r.stderr.decode())
    got = [json.loads(l)["text"] for l in r.stdout.decode().split("\n")[:-1]]
    check(f"detokenize {flag} text", got == [g[field] for g in lines], "text differs")

r = run(["tokenize"], '{"text": "a"}\n\n{"txt": "b"}\n{"text": "c"}\n')
check("malformed tokenize exit", r.returncode == 1, str(r.returncode))
check("malformed tokenize message", b"stdin line 3" in r.stderr, r.stderr.decode())
check("malformed tokenize keeps earlier output", r.stdout.decode().count("\n") == 1, r.stdout.decode())
r = run(["detokenize"], '{"ids": [5]}\n{"ids": [5, 99999999]}\n')
check("bad id exit", r.returncode == 1 and b"stdin line 2" in r.stderr, r.stderr.decode())
# Ids past 32 bits are out of the vocabulary, not "negative"; negative and fractional ones are.
# A whole number written as a float is that id, as config.json's integer fields take 128.0 (1.0
# was refused); a fraction is still refused, saying why.
r = run(["detokenize"], '{"ids": [1.0, 1e2, 5, 0.0]}\n{"ids": [1, 100, 5, 0]}\n')
texts = [json.loads(l)["text"] for l in r.stdout.decode().split("\n")[:-1]]
check("whole-number float ids", r.returncode == 0 and len(texts) == 2 and texts[0] == texts[1],
      (r.stderr.decode(), texts))
for line, want in (('{"ids": [4294967296]}', b"token id 4294967296 is not in the vocabulary"),
                   ('{"ids": [18446744073709551615]}', b"is not in the vocabulary"),
                   ('{"ids": [-1]}', b"ids must be non-negative integers, got -1"),
                   ('{"ids": [2.5]}', b"ids must be non-negative integers, got 2.5"),
                   ('{"ids": [1.5]}', b"ids must be non-negative integers, got 1.5 (not a whole number)"),
                   ('{"ids": [-1.0]}', b"ids must be non-negative integers, got -1.0\n"),
                   ('{"ids": [1e30]}', b"token id 1e+30 is not in the vocabulary"),
                   ('{"ids": [128815.0]}', b"token id 128815.0 is not in the vocabulary")):
    r = run(["detokenize"], line + "\n")
    check(f"detokenize {line}", r.returncode == 1 and want in r.stderr, r.stderr.decode())

# --add-bos without tokenizer_config.json adds nothing: it says so on stderr (it was silent)
import shutil
import tempfile
bare = tempfile.mkdtemp(prefix="deepinfer-tok-")
try:
    shutil.copy(os.path.join(tokenizer, "tokenizer.json"), bare)
    r = subprocess.run([binary, "tokenize", "--tokenizer", bare, "--add-bos"], input=b'{"text": "a"}\n',
                       capture_output=True)
    check("add-bos without config exit", r.returncode == 0, r.stderr.decode())
    check("add-bos without config note", b"has no tokenizer_config.json" in r.stderr, r.stderr.decode())
    r = run(["tokenize", "--add-bos"], '{"text": "a"}\n')
    check("add-bos with config: no note", b"tokenizer_config" not in r.stderr, r.stderr.decode())
finally:
    shutil.rmtree(bare, ignore_errors=True)

for f in failures:
    print("FAIL", f)
print(f"cli_test: {len(failures)} failures")
sys.exit(1 if failures else 0)
