#!/usr/bin/env python3
"""Differential test of the regex front ends against their reference engines, on random patterns:
JSON Schema `pattern` (ECMAScript, search) against node's `new RegExp(p, "u").test(s)`, and Lark
terminals `/p/flags` (Python's re, full match) against CPython's `re.fullmatch` on the text Lark
builds ((?f:p) per flag). A refusal by us is counted, never a failure; a string judged otherwise,
or a pattern the reference refuses and we take, is printed and makes the exit status 1.
Not part of ctest (it needs node and CPython 3.11). Usage:
  regex_differential.py --deepinfer build/bin/deepinfer [--seed 1] [--count 300] [ecma|lark ...]
"""
import argparse
import collections
import itertools
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import warnings

warnings.simplefilter("ignore")  # re's FutureWarning on possible set operations


def ecma_patterns(rng, n):
    # Anchors in groups and alternations (helper-74's generator, session 50).
    def atom(d):
        r = rng.random()
        if d > 2 or r < 0.45:
            return rng.choice(["a", "b", "c", "a", "b", "^", "$"])
        return ("(" if r < 0.75 else "(?:") + alt(d + 1) + ")"

    def item(d):
        a = atom(d)
        if len(a) == 1 and a not in "^$" and rng.random() < 0.3:
            a += rng.choice(["*", "?", "+"])
        return a

    def alt(d):
        return "|".join("".join(item(d) for _ in range(rng.randint(0, 2)))
                        for _ in range(rng.randint(1, 3)))

    pats = set()
    while len(pats) < n:
        p = alt(0)
        if "^" in p or "$" in p:
            pats.add(p)
    return sorted(pats)


def lark_patterns(rng, n):
    toks = ["a", "b", "(", ")", "(?:", "(?i)", "(?s)", "(?a)", "(?x)", "(?#c)", "|", "*", "?",
            "[ab]", ".", "\\w", " ", "(?i:", "(?-i:", "k", "\\Z", "\\A", "$", "^", "{2}"]
    cases = set()
    while len(cases) < n:
        p = "".join(rng.choice(toks) for _ in range(rng.randint(1, 5)))
        cases.add((p, "".join(rng.sample("isu", rng.randint(0, 2)))))
    return sorted(cases)


def check(deepinfer, tmp, args, strings):
    """Our verdicts for `strings`, or None where the grammar does not compile."""
    lines = os.path.join(tmp, "strings.jsonl")
    with open(lines, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": s}) + "\n" for s in strings)
    r = subprocess.run([deepinfer, "grammar", "check", *args, "--strings", lines],
                       capture_output=True, text=True)
    if r.returncode == 2:
        return None
    if r.returncode != 0:
        sys.exit(f"grammar check failed: {r.stderr.strip()}")
    return [json.loads(line)["accepted"] for line in r.stdout.splitlines()]


def run_ecma(deepinfer, tmp, rng, n, counts):
    pats = ecma_patterns(rng, n)
    strs = [""] + ["".join(t) for k in range(1, 4) for t in itertools.product("abc", repeat=k)]
    js = ("const c=JSON.parse(require('fs').readFileSync(0,'utf8'));const o={};"
          "for(const p of c.pats){const r=new RegExp(p,'u');o[p]=c.strs.map(s=>r.test(s));}"
          "console.log(JSON.stringify(o));")
    truth = json.loads(subprocess.run(["node", "-e", js], input=json.dumps({"pats": pats, "strs": strs}),
                                      capture_output=True, text=True, check=True).stdout)
    schema = os.path.join(tmp, "schema.json")
    for p in pats:
        with open(schema, "w", encoding="utf-8") as f:
            json.dump({"type": "string", "pattern": p}, f)
        # Strings as JSON text: the schema checks JSON values.
        got = check(deepinfer, tmp, ["--json-schema", schema], [json.dumps(s) for s in strs])
        if got is None:
            counts["ecma refused"] += 1
        elif got == truth[p]:
            counts["ecma agree"] += 1
        else:
            counts["ecma MISMATCH"] += 1
            print("ecma MISMATCH", repr(p), [s for s, g, w in zip(strs, got, truth[p]) if g != w][:6])


def run_lark(deepinfer, tmp, rng, n, counts):
    strs = ["", "a", "A", "b", "ab", "aa", "k", "K", "\u212a", "\n", " "]
    grammar = os.path.join(tmp, "g.lark")
    for p, flags in lark_patterns(rng, n):
        text = p
        for f in flags:  # as Lark's PatternRE.to_regexp builds it
            text = f"(?{f}:{text})"
        try:
            rx = re.compile(text)
        except (re.error, ValueError, RecursionError):
            rx = None
        with open(grammar, "w", encoding="utf-8") as f:
            f.write(f"start: /{p}/{flags}\n")
        got = check(deepinfer, tmp, ["--ebnf", grammar], strs)
        if rx is None:
            key = "lark both refuse" if got is None else "lark CPYTHON REFUSES, OURS TAKES"
            if got is not None:
                print("lark CPython refuses, ours takes:", repr(p), flags)
        elif got is None:
            key = "lark refused"
        elif got == [rx.fullmatch(s) is not None for s in strs]:
            key = "lark agree"
        else:
            key = "lark MISMATCH"
            print("lark MISMATCH", repr(p), flags)
        counts[key] += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=300, help="patterns per front end")
    ap.add_argument("front_ends", nargs="*", default=["ecma", "lark"])
    a = ap.parse_args()
    rng = random.Random(a.seed)
    counts = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        if "ecma" in a.front_ends:
            run_ecma(a.deepinfer, tmp, rng, a.count, counts)
        if "lark" in a.front_ends:
            run_lark(a.deepinfer, tmp, rng, a.count, counts)
    print(json.dumps(dict(sorted(counts.items()))))
    return 1 if any("MISMATCH" in k or "TAKES" in k for k in counts) else 0


if __name__ == "__main__":
    sys.exit(main())
