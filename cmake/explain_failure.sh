#!/usr/bin/env bash
# Runs one compile command (CMake's RULE_LAUNCH_COMPILE). Its output passes through unchanged; if it fails, the
# file that failed and the likely fix for the common causes are printed after it.
log=$(mktemp)
"$@" 2>"$log"
status=$?
cat "$log" >&2
if [ "$status" -ne 0 ]; then
  source_file=""
  prev=""
  for arg in "$@"; do
    if [ "$prev" = "-c" ]; then source_file="$arg"; fi
    case "$arg" in *.cu|*.cpp|*.cc|*.c) source_file="$arg" ;; esac
    prev="$arg"
  done
  echo "flashattn: compiling ${source_file:-a file} failed (exit status $status)." >&2
  if [ "$status" -eq 137 ] || [ "$status" -eq 9 ] || grep -qiE "killed|out of memory|cannot allocate memory|virtual memory exhausted" "$log"; then
    echo "flashattn: the compiler was killed or ran out of memory: build with fewer parallel jobs," \
         "e.g. MAX_JOBS=1 pip install . (or FLASHATTN_JOBS=1), and close other programs." >&2
  elif grep -qiE "unsupported gpu architecture|nvcc fatal.*arch" "$log"; then
    echo "flashattn: this nvcc cannot build an architecture in FLASHATTN_CUDA_ARCHS: set it to ones your toolkit" \
         "supports (nvcc --list-gpu-arch), e.g. FLASHATTN_CUDA_ARCHS='80;90a'." >&2
  elif grep -qE "Python.h|nanobind/.*No such file" "$log"; then
    echo "flashattn: Python or nanobind headers are missing: install python3-dev (Debian/Ubuntu) and" \
         "pip install nanobind, or let pip's build isolation provide nanobind." >&2
  elif grep -qE "cuda_runtime.*No such file|cuda.h.*No such file" "$log"; then
    echo "flashattn: CUDA headers not found: install the CUDA toolkit and set CUDA_HOME." >&2
  fi
fi
rm -f "$log"
exit "$status"
