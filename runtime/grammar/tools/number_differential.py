#!/usr/bin/env python3
"""JSON Schema numbers (bounds, multipleOf) through `deepinfer grammar check` against Python's
jsonschema with exact (Decimal) numbers, on random spellings near multiples and bounds.

Counts wrong accepts (the grammar takes a value the schema refuses: always a bug) and valid
values refused (documented limits, e.g. exponent spellings of a large step). Given --old, also
the cases the old binary accepted and this one refuses.

  runtime/grammar/tools/number_differential.py --bin build/bin/deepinfer [--old OLD] [--seed N]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from decimal import Decimal

import jsonschema
from jsonschema import validators

SCHEMAS = [
    '{"type":"integer","multipleOf":1000000}',
    '{"type":"integer","multipleOf":1000000,"minimum":0,"maximum":100000}',
    '{"type":"integer","multipleOf":1000000,"minimum":-5000000,"maximum":12000000}',
    '{"type":"number","multipleOf":1000000,"exclusiveMinimum":-3000000}',
    '{"type":"integer","multipleOf":86400}',
    '{"type":"integer","multipleOf":86400,"minimum":0,"maximum":100000}',
    '{"type":"integer","multipleOf":999}',
    '{"type":"integer","multipleOf":999,"minimum":0,"maximum":100000}',
    '{"type":"integer","multipleOf":15625}',
    '{"type":"integer","multipleOf":15625,"maximum":-15625}',
    '{"type":"integer","multipleOf":65536,"minimum":0}',
    '{"type":"integer","multipleOf":3200,"exclusiveMaximum":64000.5}',
    '{"type":"integer","multipleOf":250,"minimum":-1000,"maximum":1000}',
    '{"type":"integer","multipleOf":4999}',
    '{"type":"integer","multipleOf":7,"minimum":0}',
    '{"type":"integer","multipleOf":1000000000000}',
    '{"type":"number","multipleOf":0.01,"minimum":0,"maximum":1000}',
    '{"type":"integer","multipleOf":12,"allOf":[{"multipleOf":250000}]}',
]


def is_integer(_, x):
    if isinstance(x, bool):
        return False
    return isinstance(x, int) or (isinstance(x, Decimal) and x == x.to_integral_value())


def is_number(_, x):
    return not isinstance(x, bool) and isinstance(x, (int, Decimal))


CHECKER = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
    {"integer": is_integer, "number": is_number})
VALIDATOR = validators.extend(jsonschema.Draft202012Validator, type_checker=CHECKER)


def exact(text):
    return json.loads(text, parse_float=Decimal, parse_int=Decimal)


def spell(v, rng):
    """A random JSON spelling of the Decimal v: plain, zero fraction, or with an exponent."""
    kind = rng.randrange(4)
    if kind == 0:
        return format(v, "f")
    if kind == 1:
        t = format(v, "f")
        return t + ("" if "." in t else ".") + "0" * rng.randint(1, 3)
    if v == 0:
        return rng.choice(["0", "-0", "-0.0", "0e5", "-0.0E-3"])
    e = rng.randint(-8, 8)
    m = format(v.scaleb(-e), "f")
    if "." in m:
        m = m.rstrip("0").rstrip(".") if rng.random() < 0.7 else m
    sign = rng.choice(["", "+", "-"] if e > 0 else (["-"] if e < 0 else ["", "+", "-"]))
    return m + rng.choice("eE") + sign + "0" * rng.randint(0, 1) + str(abs(e))


def values(schema, rng, n):
    """Values near multiples of the step and near the bounds."""
    steps = [Decimal(str(schema.get("multipleOf", 1)))]
    steps += [Decimal(str(s["multipleOf"])) for s in schema.get("allOf", [])]
    anchors = [Decimal(0)] + [Decimal(str(schema[k])) for k in
                              ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
                              if k in schema]
    out = []
    for _ in range(n):
        step = rng.choice(steps)
        base = rng.choice(anchors) if rng.random() < 0.5 else Decimal(0)
        v = (base / step).to_integral_value() * step + step * rng.randint(-6, 6)
        r = rng.random()
        if r < 0.2:
            v += rng.choice([1, -1, Decimal("0.5"), step / 2])
        elif r < 0.3:
            v = Decimal(rng.randint(-10**13, 10**13))
        out.append(v)
    return out


def verdicts(binary, schema_text, texts):
    with tempfile.TemporaryDirectory() as d:
        sp, tp = os.path.join(d, "s.json"), os.path.join(d, "t.jsonl")
        with open(sp, "w") as f:
            f.write(schema_text)
        with open(tp, "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
        r = subprocess.run([binary, "grammar", "check", "--json-schema", sp, "--strings", tp],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None, r.stderr.strip().splitlines()[-1]
        return [json.loads(line)["accepted"] for line in r.stdout.splitlines()], ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--old", help="an older deepinfer to compare refusals with")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--per-schema", type=int, default=400)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    wrong = refused = newly_refused = total = 0
    for text in SCHEMAS:
        schema = exact(text)
        v = VALIDATOR(schema)
        texts = [spell(x, rng) for x in values(schema, rng, args.per_schema)]
        want = [v.is_valid(exact(t)) for t in texts]
        got, err = verdicts(args.bin, text, texts)
        if got is None:
            print(f"{text}: does not compile: {err}")
            continue
        old = verdicts(args.old, text, texts)[0] if args.old else None
        w = [t for t, a, b in zip(texts, got, want) if a and not b]
        r = sum(1 for a, b in zip(got, want) if b and not a)
        nr = [t for i, t in enumerate(texts) if old and old[i] and not got[i]]
        total += len(texts)
        wrong, refused, newly_refused = wrong + len(w), refused + r, newly_refused + len(nr)
        print(f"{text}: {len(texts)} cases, {sum(want)} valid, wrong accepts {len(w)} {w[:5]}, "
              f"valid refused {r}" + (f", refused now, accepted by --old {len(nr)} {nr[:5]}"
                                      if old else (", --old does not compile" if args.old else "")))
    print(f"total {total} cases: wrong accepts {wrong}, valid refused {refused}"
          + (f", newly refused {newly_refused}" if args.old else ""))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
