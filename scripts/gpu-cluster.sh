#!/usr/bin/env bash
# Serves tiny-v41 from the two-node cluster of examples/cluster-2node.toml with its executor on
# DEEPINFER_CLUSTER_DEVICE (default cuda) and checks that greedy requests through
# `deepinfer client` give the same tokens as `deepinfer generate --cuda-graphs off` on that
# device (the same model runner, reached through router, scheduler and executor actors on two
# processes; the executor replays CUDA graphs, model.cuda_graphs' default, the reference
# launches every kernel).
# On the GPU machine scripts/gpu-forward.sh runs it after unpacking the bundle; here it runs
# with DEEPINFER_BIN=build/bin/deepinfer DEEPINFER_CLUSTER_DEVICE=cpu. Exit 1 on a mismatch.
set -uo pipefail
cd "$(dirname "$0")/.."
di=${DEEPINFER_BIN:-/tmp/fwd/bin/deepinfer}
dev=${DEEPINFER_CLUSTER_DEVICE:-cuda}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$di" make-model --preset tiny-v41 --out "$work/model" --quiet || exit 1
"$di" launch examples/cluster-2node.toml --set model.path="$work/model" \
  --set nodes.1.devices="$dev" --set router.port=7380 --set nodes.0.port=7381 \
  --set nodes.1.port=7382 >"$work/launch.log" 2>&1 &
launcher=$!
for _ in $(seq 240); do
  grep -q "^ready:" "$work/launch.log" && break
  kill -0 $launcher 2>/dev/null || break
  sleep 0.5
done
if ! grep -q "^ready:" "$work/launch.log"; then
  echo "cluster ($dev): not ready"; tail -20 "$work/launch.log"; kill -INT $launcher; exit 1
fi
grep -o "runner ready on .*" "$work/launch.log" | head -2  # the device, "(CUDA graphs)" when on
ids() { python3 -c 'import json,sys; print(",".join(map(str, json.loads(sys.stdin.readline())["output_ids"])))'; }
fail=0
for prompt in "The capital of France is" "def fib(n):" "一二三四五"; do
  got=$("$di" client --connect 127.0.0.1:7380 --prompt "$prompt" --temperature 0 --max-tokens 16 \
    --ignore-eos --json | ids)
  want=$("$di" generate --model "$work/model" --device "$dev" --prompt "$prompt" --temperature 0 \
    --max-tokens 16 --ignore-eos --cuda-graphs off --json 2>/dev/null | ids)
  if [[ -n $got && $got == "$want" ]]; then
    echo "cluster ($dev) == generate ($dev): \"$prompt\" -> $got"
  else
    echo "MISMATCH ($dev) \"$prompt\": cluster [$got] generate [$want]"; fail=1
  fi
done
kill -INT $launcher
wait $launcher
echo "cluster ($dev): launcher exit $?, $([[ $fail == 0 ]] && echo all equal || echo MISMATCH)"
exit $fail
