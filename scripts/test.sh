#!/usr/bin/env bash
# Builds flashattn and runs the whole test suite. GPU tests skip, printing why, where no GPU is visible.
#   FLASHATTN_BUILD_DIR  build folder (default: build)
#   FLASHATTN_JOBS       parallel compile jobs (default: all cores)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/install_deps.sh"
build=${FLASHATTN_BUILD_DIR:-$root/build}
jobs=${FLASHATTN_JOBS:-$(nproc)}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test.sh: no GPU visible here: the GPU tests will be listed as skipped (each skips saying 'no GPU visible');" \
       "scripts/gpu_check.sh runs them on a machine with one."
fi
ctest --test-dir "$build" --output-on-failure -j "$jobs"
