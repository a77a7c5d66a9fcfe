#!/usr/bin/env bash
# Builds flashattn and runs the whole test suite: the C++ tests (ctest) and the Python package's (pytest, against the
# package as built in <build>/python). GPU tests skip, printing why, where no GPU is visible.
#   FLASHATTN_BUILD_DIR  build folder (default: build)
#   FLASHATTN_JOBS       parallel compile jobs (default: all cores)
#   FLASHATTN_NO_PYTHON  1: neither install the Python packages nor run the Python tests
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
if [ "${FLASHATTN_NO_PYTHON:-0}" = 1 ]; then
  echo "test.sh: FLASHATTN_NO_PYTHON=1: the Python package's tests are not run"
else
  PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest "$root/tests/python" -q -p no:cacheprovider
fi
