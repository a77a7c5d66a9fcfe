#!/usr/bin/env bash
# Builds the Python package as a user's `pip install .` does (build isolation: pip fetches scikit-build-core and
# nanobind itself), installs it into a fresh virtual environment that sees this Python's torch, and runs the Python
# tests against the installed package, not the build tree. Prints how long the install took.
#   FLASHATTN_WHEEL_DIR   where the environment and logs go (default: build/wheel-check)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${FLASHATTN_WHEEL_DIR:-$root/build/wheel-check}
rm -rf "$work"
mkdir -p "$work"
python3 -m venv --system-site-packages "$work/venv"
py="$work/venv/bin/python"

start=$(date +%s)
if ! "$py" -m pip install -q "$root" > "$work/pip-install.log" 2>&1; then
  cat "$work/pip-install.log"
  echo "check_wheel: pip install failed (log above)" >&2
  exit 1
fi
echo "check_wheel: pip install . took $(( $(date +%s) - start )) s"

# From outside the source tree, so that the installed package is what gets imported.
cd "$work"
"$py" -c "import flashattn, sys; print('check_wheel: imported flashattn', flashattn.__version__, 'from', flashattn.__file__)"
"$py" -m flashattn doctor || true  # the report; a problem it finds (no GPU here) is not a failure of the package
"$py" -m pytest "$root/tests/python" -q -p no:cacheprovider --rootdir "$root"
