#!/usr/bin/env bash
# Compile time of a JSON Schema `pattern` that searches for one of N random words (an
# alternation (w1|w2|...|wN), matched anywhere in the string: the literal search automaton of
# runtime/grammar/regex_search.cpp), through `deepinfer grammar check`. Prints a figure per N:
# wall and CPU seconds, peak RSS, the compiled grammar's rules and automaton states. Speed goals
# are reported, not asserted: nothing here fails on a slow run.
#
#   scripts/grammar-search-bench.sh [N ...]        (default: 1000 3000 10000)
#   DEEPINFER=/path/to/deepinfer LETTERS=10 scripts/grammar-search-bench.sh 1000
#
# DEEPINFER: the binary (default build/bin/deepinfer); LETTERS: letters a word (default 10; the
# words are the same for a given N and LETTERS). The time includes the CLI's start (a one-word
# pattern: about 0.15 s). On a shared machine compare CPU seconds, and two binaries in one run.
# TOKENIZER=DIR also times the token side (`grammar bench`, lazy: the compile plus token classes
# and sharing keys over that vocabulary, without classifying states) and prints its compile
# seconds after "token:" (that run's CPU seconds include loading the tokenizer, ~0.6 s).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DEEPINFER:-build/bin/deepinfer}
letters=${LETTERS:-10}
[[ $# -gt 0 ]] || set -- 1000 3000 10000
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for n in "$@"; do
  python3 - "$n" "$letters" "$dir/w$n" <<'EOF'
import json, random, sys
n, letters, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(94)
words = set()
while len(words) < n:
    words.add(''.join(rng.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(letters)))
words = sorted(words)
with open(out + '.schema.json', 'w') as f:
    json.dump({"type": "string", "pattern": "(" + "|".join(words) + ")"}, f)
with open(out + '.jsonl', 'w') as f:
    f.write(json.dumps({"text": json.dumps("xx" + words[n // 2] + "yy")}) + "\n")
    f.write(json.dumps({"text": json.dumps("x" * letters)}) + "\n")
with open(out + '.bench.jsonl', 'w') as f:
    schema = {"type": "string", "pattern": "(" + "|".join(words) + ")"}
    tests = [{"data": "xx" + words[n // 2] + "yy", "valid": True}, {"data": "x" * letters, "valid": False}]
    f.write(json.dumps({"id": "w%d" % n, "schema": schema, "tests": tests}) + "\n")
EOF
  if /usr/bin/time -f "%e %U %S %M" -o "$dir/time" "$bin" grammar check --print-grammar \
    --json-schema "$dir/w$n.schema.json" --strings "$dir/w$n.jsonl" >"$dir/out" 2>"$dir/err"; then
    got=$(tr '\n' ' ' <"$dir/out")
    [[ $got == '{"accepted": true} {"accepted": false} ' ]] || got="WRONG: $got"
    size=$(tail -1 "$dir/err")
  else
    got="refused: $(grep -o 'grammar too [a-z]*[^.]*' "$dir/err" | head -1 | cut -c1-90)"
    size="-"
  fi
  read -r wall user sys rss < <(tail -1 "$dir/time")
  token=""
  if [[ -n ${TOKENIZER:-} ]]; then
    if /usr/bin/time -f "%U %S %M" -o "$dir/ttime" "$bin" grammar bench --json \
      --tokenizer "$TOKENIZER" --schemas "$dir/w$n.bench.jsonl" >"$dir/tout" 2>"$dir/terr"; then
      read -r tuser tsys trss < <(tail -1 "$dir/ttime")
      token=$(python3 -c 'import json, sys
d = json.loads(open(sys.argv[1]).readlines()[-1])
ok = d["compiled"] == 1 and d["mask_violations"] == 0
print("token: compile %.2f s%s" % (d["compile_us"]["mean"] / 1e6, "" if ok else " WRONG"), end="")' \
        "$dir/tout")
      token="$token ($(echo "$tuser + $tsys" | bc) s cpu, $((trss / 1024)) MiB)"
    else
      token="token: failed"
    fi
  fi
  printf '%6d words x %2d letters: %6.2f s wall %6.2f s cpu %5d MiB  %s  %s  %s\n' "$n" "$letters" \
    "$wall" "$(echo "$user + $sys" | bc)" $((rss / 1024)) "$size" "$got" "$token"
done
