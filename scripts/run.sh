#!/usr/bin/env bash
# Installs what is needed, builds flashattn and runs `flashattn run` on the default shape (extra arguments are
# passed to it, e.g. `bash scripts/run.sh --seqlen 2048 --causal --backward`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/install_deps.sh"
build=${FLASHATTN_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "${FLASHATTN_JOBS:-$(nproc)}" --target flashattn_cli
"$build/flashattn" run "$@"
