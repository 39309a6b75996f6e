#!/usr/bin/env bash
# Gathers what a device call needs for the whole-model GPU run into $build/bundle (default
# build-cuda-fwd): test_forward_cuda (and test_kernels_cuda / test_cuda_model_ops when built
# there), the deepinfer CLI, bench_kernels_cuda and bench_attention_decode when they are built, the non-system shared
# libraries they load (lib/), the bench/peer script's inputs, and the golden checkpoints that
# fit a call (v41_public, its unread embedding rows zeroed; v4_public's 76 MB model does not fit
# the 64 MiB a call carries) under shared/testdata/golden, packed into $build/fwd-bundle.tar.xz (the libraries alone are over
# 30 MB unpacked). Carry $build/fwd-bundle.tar.xz and run scripts/gpu-forward.sh there. It
# builds those targets first (DEEPINFER_BUNDLE_NO_BUILD=1: packs what is built as it is).
#
# With --v4-golden it packs only test_forward_cuda, its libraries and v4_public -- with the
# embedding rows no test token reads zeroed (scripts/trim-golden-embedding.py), which makes it
# compress to ~37 MB -- into $build/v4-golden.tar.xz; carry that instead and run
# scripts/gpu-forward.sh (no preset) to run the v4_public golden on the GPU.
#
# With --kernels it packs only test_kernels_cuda, bench_kernels_cuda and their libraries (~5 MB
# with -9e) into $build/kernel-bundle.tar.xz, for scripts/gpu-kernel-ab.sh: a per-kernel A/B
# in a call that must be short (no model, no goldens).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DEEPINFER_CUDA_BUILD_DIR:-build-cuda-fwd}
v4_golden=0 kernels=0
[[ ${1:-} == --v4-golden ]] && v4_golden=1
[[ ${1:-} == --kernels ]] && kernels=1
bundle=$build/bundle
# Build what is bundled first (a bundle of stale binaries cost a device call in session 20):
# the targets of the list that the build directory defines. DEEPINFER_BUNDLE_NO_BUILD=1 packs
# the binaries as they are.
if [[ ${DEEPINFER_BUNDLE_NO_BUILD:-0} != 1 ]]; then
  wanted=(test_forward_cuda)
  [[ $v4_golden == 0 ]] && wanted+=(test_kernels_cuda test_cuda_model_ops deepinfer
    bench_kernels_cuda bench_attention_decode)
  [[ $kernels == 1 ]] && wanted=(test_kernels_cuda bench_kernels_cuda)
  defined=$(cmake --build "$build" --target help | awk '{print ($1 == "..." ? $2 : $1)}' | sed 's/:$//')
  targets=()
  for t in "${wanted[@]}"; do grep -qx "$t" <<<"$defined" && targets+=("$t"); done
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
fi
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/tests" "$bundle/lib" "$bundle/shared/testdata/golden"
if [[ $kernels == 1 ]]; then
  cp "$build/tests/test_kernels_cuda" "$bundle/tests/"
  cp "$build/bin/bench_kernels_cuda" "$bundle/bin/"
else
  cp "$build/tests/test_forward_cuda" "$bundle/tests/"
fi
if [[ $v4_golden == 0 && $kernels == 0 ]]; then
  for t in test_kernels_cuda test_cuda_model_ops; do  # the kernel-level GPU tests when built
    if [[ -x $build/tests/$t ]]; then cp "$build/tests/$t" "$bundle/tests/"; fi
  done
  # DEEPINFER_BUNDLE_NO_BENCH=1: without the kernel benches (the per-kernel table is skipped).
  # With them and -9e the bundle is ~49 MB, which with the tree fits a call (64 MiB).
  benches=(bin/bench_kernels_cuda bench/bench_attention_decode)
  [[ ${DEEPINFER_BUNDLE_NO_BENCH:-0} == 1 ]] && benches=()
  for b in bin/deepinfer "${benches[@]}"; do  # when built
    if [[ -x $build/$b ]]; then cp "$build/$b" "$bundle/bin/"; fi
  done
  # DEEPINFER_BASE_BIN: another build's deepinfer (same libraries, e.g. an older commit) that
  # gpu-forward.sh benchmarks beside this one on the same checkpoint.
  if [[ -n ${DEEPINFER_BASE_BIN:-} ]]; then cp "$DEEPINFER_BASE_BIN" "$bundle/bin/deepinfer-base"; fi
fi
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia)[.-]'
for exe in "$bundle"/bin/* "$bundle"/tests/*; do
  [[ -f $exe ]] && ldd "$exe" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ ! $name =~ $system ]]; then cp -L "$path" "$bundle/lib/$name"; fi
done
# CUPTI for `bench decode --timeline` (loaded at run time, so ldd does not list it).
for c in /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/lib/libcupti.so.13 \
  /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13; do
  if [[ -f $c ]]; then cp -L "$c" "$bundle/lib/" && break; fi
done
if ls "$bundle"/lib/libucs.so* >/dev/null 2>&1; then
  ucx_dir=$(dirname "$(ldconfig -p | awk '/libucs.so/ {print $NF; exit}')")/ucx
  [[ -d $ucx_dir ]] && cp -rL "$ucx_dir" "$bundle/lib/ucx"
fi
shared=${DEEPINFER_SHARED_DIR:-../shared}
cp "$shared/testdata/golden/README.md" "$bundle/shared/testdata/golden/"
if [[ $kernels == 1 ]]; then
  out=$build/kernel-bundle.tar.xz
elif [[ $v4_golden == 1 ]]; then
  python3 scripts/trim-golden-embedding.py "$shared/testdata/golden/v4_public" \
    "$bundle/shared/testdata/golden/v4_public"
  out=$build/v4-golden.tar.xz
else
  mkdir -p "$bundle/share/deepinfer/assets"  # make-model finds its tokenizer beside bin/
  cp -r assets/deepseek-v3-tokenizer "$bundle/share/deepinfer/assets/"
  # The embedding rows no test token reads zeroed, as for v4_public: ~6 MB less packed, which
  # makes room for the kernel benches (the CPU golden tests give identical output on the copy).
  python3 scripts/trim-golden-embedding.py "$shared/testdata/golden/v41_public" \
    "$bundle/shared/testdata/golden/v41_public"
  out=$build/fwd-bundle.tar.xz
fi
chmod -R u+w "$bundle"
# DEEPINFER_BUNDLE_XZ="-9e" packs ~17% smaller (about 2 minutes instead of 50 s on 2 cores) when
# the bundle and the tree would exceed what a device call carries (64 MiB).
tar -C "$bundle" -cf - . | xz -T2 ${DEEPINFER_BUNDLE_XZ:--6} >"$out"
du -sh "$bundle" "$out"
size=$(stat -c %s "$out")
if ((size > 62 * 1024 * 1024)); then
  echo "gpu-forward-bundle: $out is $((size >> 20)) MiB, over what a device call carries" >&2
  exit 1
fi
