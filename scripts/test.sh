#!/usr/bin/env bash
# Runs every test that this machine can run: installs missing packages, builds (same as
# scripts/setup.sh), then runs ctest. GPU tests (label `gpu`) skip themselves without a GPU.
# Extra arguments go to ctest, e.g. `scripts/test.sh -L cpu` or `scripts/test.sh -R tokenizer`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build_dir=${DEEPINFER_BUILD_DIR:-build}
jobs=${DEEPINFER_JOBS:-$(nproc)}
ctest --test-dir "$build_dir" --output-on-failure --timeout 900 -j "$jobs" "$@"
