#!/usr/bin/env bash
# One-command setup: installs the Debian packages the build needs (only those missing),
# then configures and builds DeepInfer-C++ into ./build (or $DEEPINFER_BUILD_DIR).
# Options: --deps-only (install packages, do not build), --no-deps (build only),
# anything after `--` goes to CMake (e.g. -- -DDEEPINFER_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config git python3 python3-venv python3-pip
  libcaf-dev libssl-dev libucx-dev libmsgpack-cxx-dev
  libspdlog-dev libfmt-dev doctest-dev libtomlplusplus-dev nlohmann-json3-dev
  libpcre2-dev libboost-dev libcli11-dev libomp-dev libicu-dev
  clang libclang-rt-14-dev
  gnuplot-nox  # `deepinfer bench serve --plot` (optional for users; its test needs it)
)

want_deps=1; want_build=1; cmake_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --deps-only) want_build=0 ;;
    --no-deps) want_deps=0 ;;
    --) shift; cmake_args=("$@"); break ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

if [[ $want_deps == 1 ]]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "setup: installing ${missing[*]}"
    sudo_cmd=(); [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # Python packages of the tests: the HTTP server tests drive it with the official client.
  if ! python3 -c "import openai" 2>/dev/null; then
    echo "setup: pip install openai"
    python3 -m pip install -q openai 2>/dev/null ||
      python3 -m pip install -q --user --break-system-packages openai
  fi
fi

if [[ $want_build == 1 ]]; then
  build_dir=${DEEPINFER_BUILD_DIR:-build}
  jobs=${DEEPINFER_JOBS:-$(nproc)}
  if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
    cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}"
  elif [[ ${#cmake_args[@]} -gt 0 ]]; then
    cmake "$build_dir" "${cmake_args[@]}"
  fi
  cmake --build "$build_dir" -j "$jobs"
fi
