#!/usr/bin/env bash
# Interleaved per-kernel A/B on the GPU machine (run it as a device call's command, carrying
# BUILD/kernel-bundle.tar.xz from `scripts/gpu-forward-bundle.sh --kernels`, ~5 MB; BUILD is
# build-cuda-fwd, or build when DEEPINFER_CUDA_BUILD_DIR=build made it):
# first, when --gate is given, the kernel tests matching it under every setting (a setting
# that fails them is reported and left out of the timings), then bench_kernels_cuda --filter F
# for each setting in turn, for several rounds, and one table: each benchmark row's best
# median time per setting and its ratio to the first setting's. A short call: no model is made.
#
#   bash scripts/gpu-kernel-ab.sh [options] NAME=VAR=value,VAR=value ... NAME= ...
#     --filter F    bench_kernels_cuda --filter (default "V4.1 fp8 ")
#     --rounds R    rounds over all settings (default 2)
#     --gate P      doctest -tc pattern of test_kernels_cuda to run under each setting first
#     --match RE    only table rows whose "kernel shape" matches this regex (default: all)
#     --all-sizes   keep the M=4096 rows (DEEPINFER_BENCH_DECODE_ONLY=1 is set otherwise)
#   e.g. --gate "*tile_gemv*" --match " M=(1|8) " l1=DEEPINFER_TILE_GEMV_ACT=l1 l2=
# Files: $OUT/kernel-ab-<round>-<setting>.json (the bench's rows), $OUT/kernel-ab.txt (table).
set -uo pipefail
cd "$(dirname "$0")/.."
filter="V4.1 fp8 " rounds=2 gate="" match="" all_sizes=0
settings=()
while (($#)); do
  case $1 in
    --filter) filter=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --gate) gate=$2; shift 2 ;;
    --match) match=$2; shift 2 ;;
    --all-sizes) all_sizes=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *=*) settings+=("$1"); shift ;;
    *) echo "gpu-kernel-ab.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#settings[@]})) || { echo "gpu-kernel-ab.sh: no settings (see --help)" >&2; exit 2; }
out=${OUT:-/tmp/out}
kb=/tmp/kernel-bundle
mkdir -p "$out" "$kb"
if [[ ! -x $kb/bin/bench_kernels_cuda ]]; then  # whichever build directory's bundle was carried
  for b in build-cuda-fwd/kernel-bundle.tar.xz build/kernel-bundle.tar.xz; do
    [[ -f $b ]] && { tar -C "$kb" -xJf "$b" || exit 1; break; }
  done
  [[ -x $kb/bin/bench_kernels_cuda ]] || { echo "gpu-kernel-ab.sh: no kernel bundle carried" >&2; exit 1; }
fi
export LD_LIBRARY_PATH=$kb/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
((all_sizes)) || export DEEPINFER_BENCH_DECODE_ONLY=1
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed 's/^/card: /'
timed=()
for s in "${settings[@]}"; do
  name=${s%%=*} vars=${s#*=}
  IFS=, read -ra assignments <<<"$vars"
  if [[ -n $gate ]]; then
    env "${assignments[@]}" DEEPINFER_SOURCE_DIR=$PWD timeout 120 "$kb/tests/test_kernels_cuda" \
      -tc="$gate" >"$out/kernel-ab-gate-$name.log" 2>&1
    rc=$?
    echo "gate $name ($gate): rc=$rc $(grep -E '^\[doctest\] assertions' "$out/kernel-ab-gate-$name.log")"
    if ((rc != 0)); then
      grep -E "ERROR|CHECK" "$out/kernel-ab-gate-$name.log" | head -5
      continue
    fi
  fi
  timed+=("$s")
done
((${#timed[@]})) || { echo "gpu-kernel-ab.sh: every setting failed its gate" >&2; exit 1; }
for ((r = 1; r <= rounds; ++r)); do
  for s in "${timed[@]}"; do
    name=${s%%=*} vars=${s#*=}
    IFS=, read -ra assignments <<<"$vars"
    env "${assignments[@]}" timeout 150 "$kb/bin/bench_kernels_cuda" --filter "$filter" \
      --json "$out/kernel-ab-$r-$name.json" >"$out/kernel-ab-$r-$name.log" 2>&1 ||
      echo "round $r $name: bench_kernels_cuda rc=$? ($(tail -1 "$out/kernel-ab-$r-$name.log"))"
  done
done
names=()
for s in "${timed[@]}"; do names+=("${s%%=*}"); done
python3 scripts/kernel-ab-table.py "$out" "$match" "${names[@]}" | tee "$out/kernel-ab.txt"
