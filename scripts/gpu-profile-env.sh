# Sourced by the profiling scripts on the GPU machine (scripts/gpu-profile.sh,
# scripts/gpu-kernel-profile.sh): repository root as the working directory, $out (= $OUT or
# /tmp/out), the bundle of scripts/gpu-forward-bundle.sh unpacked into /tmp/fwd unless
# /tmp/fwd/bin/$1 is there already, its libraries on LD_LIBRARY_PATH, and $ncu (Nsight Compute;
# exits when the machine has none).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/fwd
[[ -x /tmp/fwd/bin/$1 ]] || tar -C /tmp/fwd -xJf build-cuda-fwd/fwd-bundle.tar.xz
export LD_LIBRARY_PATH=/tmp/fwd/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[[ -n $ncu ]] || { echo "no ncu here"; exit 1; }
