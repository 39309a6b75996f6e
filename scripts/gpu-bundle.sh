#!/usr/bin/env bash
# Builds the CUDA build (build-cuda/, Release, sm_90a) and gathers what the GPU machine needs
# into build-cuda/bundle: every gpu-labelled test and the kernel benchmarks (bin/, tests/),
# plus the non-system shared libraries they load (CAF, spdlog, fmt, UCX with its module
# folder ucx/, libnuma, libgomp, ...: whatever ldd finds outside glibc, libstdc++ and CUDA)
# in lib/. Binaries carry an RPATH of $ORIGIN/../lib; the GPU machine supplies glibc,
# libstdc++, cudart, cuBLAS and NCCL itself. Carry `build-cuda/bundle` in the device call and
# run scripts/gpu-check.sh there. Extra arguments name more targets to build and bundle.
#   DEEPINFER_CUDA_BUILD_DIR (default build-cuda), DEEPINFER_JOBS (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DEEPINFER_CUDA_BUILD_DIR:-build-cuda}
jobs=${DEEPINFER_JOBS:-2}
bundle=$build/bundle
benches=(bench_kernels_cuda "$@")

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON \
  '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib' >/dev/null

# The gpu-labelled tests, by executable path (ctest's own list).
mapfile -t tests < <(ctest --test-dir "$build" -L gpu --show-only=json-v1 |
  python3 -c 'import json,sys; [print(t["command"][0]) for t in json.load(sys.stdin)["tests"]]')
targets=("${benches[@]}")
for t in "${tests[@]}"; do targets+=("$(basename "$t")"); done
echo "building: ${targets[*]}"
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/tests" "$bundle/lib"
for t in "${tests[@]}"; do cp "$t" "$bundle/tests/"; done
for b in "${benches[@]}"; do
  found=$(find "$build" -path "$bundle" -prune -o -type f -name "$b" -perm -u+x -print | head -1)
  [[ -n $found ]] || { echo "gpu-bundle: no executable $b" >&2; exit 1; }
  cp "$found" "$bundle/bin/"
done

# Shared libraries the GPU machine lacks: everything ldd resolves except glibc, the C++
# runtime and CUDA's own libraries.
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia)[.-]'
for exe in "$bundle"/bin/* "$bundle"/tests/*; do
  ldd "$exe" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ ! $name =~ $system ]]; then cp -L "$path" "$bundle/lib/$name"; fi
done
# UCX loads its transports from a module folder beside libucs.
if ls "$bundle"/lib/libucs.so* >/dev/null 2>&1; then
  ucx_dir=$(dirname "$(ldconfig -p | awk '/libucs.so/ {print $NF; exit}')")/ucx
  [[ -d $ucx_dir ]] && cp -rL "$ucx_dir" "$bundle/lib/ucx"
fi
du -sh "$bundle"
size=$(du -sm "$bundle" | cut -f1)
if (( size >= 64 )); then
  echo "gpu-bundle: $bundle is ${size} MiB, over the 64 MiB a device call can carry" >&2
  exit 1
fi
echo "bundle ready: carry $bundle and run scripts/gpu-check.sh on the GPU machine"
