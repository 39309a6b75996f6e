#!/usr/bin/env python3
"""End-to-end structured output on a model: for every schema in bench/grammar/schemas, sample
N generations (temperature 1, seeds 0..N-1) with `deepinfer generate --response-format
json_schema+compact:FILE` and check each text with an independent validator (Python
`jsonschema`): it must parse as JSON, validate, and end with finish_reason "stop".

    pip install jsonschema
    python3 bench/grammar/e2e_generate.py --deepinfer build/bin/deepinfer --n 200
(no --model: deepinfer's built-in tiny-v41 test model)
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

import jsonschema


def run_schema(args, path):
    cmd = [args.deepinfer, "generate", "--prompt", args.prompt, "--temperature", "1", "--seed", "0",
           "--n", str(args.n), "--json", "--max-tokens", str(args.max_tokens),
           "--response-format", f"json_schema+compact:{path}"]
    if args.model:
        cmd += ["--model", args.model]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    schema = json.load(open(path))
    validator = jsonschema.validators.validator_for(schema)(schema)
    ok, failures, tokens = 0, [], 0
    for line in out.splitlines():
        r = json.loads(line)
        tokens += len(r["output_ids"])
        try:
            value = json.loads(r["text"])
            errors = list(validator.iter_errors(value))
            if r["finish_reason"] != "stop":
                failures.append(f"finish_reason {r['finish_reason']}: {r['text'][:80]!r}")
            elif errors:
                failures.append(f"invalid: {errors[0].message[:80]} in {r['text'][:80]!r}")
            else:
                ok += 1
        except json.JSONDecodeError as e:
            failures.append(f"not JSON ({e}): {r['text'][:80]!r}")
    return ok, len(out.splitlines()), tokens, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deepinfer", default="build/bin/deepinfer")
    ap.add_argument("--model", default="")
    ap.add_argument("--schemas", default=os.path.join(os.path.dirname(__file__), "schemas"))
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--prompt", default="Return the JSON object:")
    args = ap.parse_args()
    total_ok = total = 0
    t0 = time.time()
    for path in sorted(glob.glob(os.path.join(args.schemas, "*.json"))):
        ok, n, tokens, failures = run_schema(args, path)
        total_ok += ok
        total += n
        print(f"{os.path.basename(path):<22} {ok}/{n} parse, validate and stop  ({tokens} tokens)", flush=True)
        for f in failures[:3]:
            print("   ", f)
    print(f"all: {total_ok}/{total} in {time.time() - t0:.0f} s")
    return 0 if total_ok == total else 1


if __name__ == "__main__":
    sys.exit(main())
