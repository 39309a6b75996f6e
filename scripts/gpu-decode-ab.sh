#!/usr/bin/env bash
# Interleaved decode A/B on the GPU machine (run it as a device call's command, carrying
# build-cuda-fwd/fwd-bundle.tar.xz): one model made from a preset, then `deepinfer bench decode`
# with CUDA graphs for each named setting in turn, for several rounds, so that drift between
# processes (a few percent from one run to the next at batch 1 on the H200) shows as spread
# within a setting instead of passing for a difference between settings.
#
#   bash scripts/gpu-decode-ab.sh [options] NAME=VAR=value,VAR=value ... NAME= ...
#     --preset P    make-model preset (default v41-flash-L4)
#     --batch B     batch sizes (default 1,8,64)
#     --context N   context tokens (default 1024)
#     --steps S     timed steps per run, median reported (default 48)
#     --rounds R    rounds over all settings (default 2)
#   A setting is NAME=, then comma-separated environment assignments (none: the defaults), e.g.
#     base= no-gemv=DEEPINFER_F32_GEMV=0 no-pdl=DEEPINFER_PDL=0
# Prints one line per (round, setting, batch) and, at the end, each setting's best and worst
# ms/step per batch.
set -uo pipefail
cd "$(dirname "$0")/.."
preset=v41-flash-L4 batch=1,8,64 context=1024 steps=48 rounds=2
settings=()
while (($#)); do
  case $1 in
    --preset) preset=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --context) context=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *=*) settings+=("$1"); shift ;;
    *) echo "gpu-decode-ab.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#settings[@]})) || { echo "gpu-decode-ab.sh: no settings (see --help)" >&2; exit 2; }
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/fwd
[[ -x /tmp/fwd/bin/deepinfer ]] || tar -C /tmp/fwd -xJf build-cuda-fwd/fwd-bundle.tar.xz
export LD_LIBRARY_PATH=/tmp/fwd/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
di=/tmp/fwd/bin/deepinfer
model=/tmp/models/$preset
if [[ ! -d $model ]]; then
  $di make-model --preset "$preset" --out "$model" --quiet >"$out/make-model.log" 2>&1 ||
    { echo "make-model failed:"; tail -5 "$out/make-model.log"; exit 1; }
fi
results=$(mktemp)
for ((r = 1; r <= rounds; ++r)); do
  for s in "${settings[@]}"; do
    name=${s%%=*} vars=${s#*=}
    IFS=, read -ra assignments <<<"$vars"
    env "${assignments[@]}" timeout 150 $di bench decode --model "$model" --device cuda \
      --batch "$batch" --context "$context" --steps "$steps" --cuda-graphs on 2>&1 |
      awk -v n="$name" -v r="$r" '/^decode/ {printf "round %s %-16s batch %-4s %s ms/step\n", r, n, $3, $9}' |
      tee -a "$results"
  done
done
echo "== best / worst ms/step per setting and batch over $rounds rounds"
awk '{k = $3 " batch " $5; v = $6 + 0; if (!(k in lo) || v < lo[k]) lo[k] = v; if (v > hi[k]) hi[k] = v}
     END {for (k in lo) printf "%-30s %.2f / %.2f\n", k, lo[k], hi[k]}' "$results" | sort
