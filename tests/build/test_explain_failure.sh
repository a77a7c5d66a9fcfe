#!/usr/bin/env bash
# cmake/explain_failure.sh (every compile's wrapper): passes a compile's output and status through, and after a
# failure names the file and the fix for the common causes.
set -uo pipefail
wrapper="$(dirname "$0")/../../cmake/explain_failure.sh"
failures=0
expect() {  # expect NAME WANT_STATUS WANT_TEXT -- command...
  local name=$1 want_status=$2 want_text=$3
  shift 4
  local output status
  output=$(bash "$wrapper" "$@" 2>&1)
  status=$?
  if [ "$status" -ne "$want_status" ] || ! grep -qF -- "$want_text" <<<"$output"; then
    echo "FAIL $name: status $status (want $want_status), output:"
    echo "$output"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}
expect success 0 "" -- bash -c 'echo compiled'
expect killed 137 "MAX_JOBS=1" -- bash -c 'echo "Killed" >&2; exit 137'
expect out_of_memory 1 "fewer parallel jobs" -- bash -c 'echo "virtual memory exhausted: Cannot allocate memory" >&2; exit 1'
expect bad_arch 1 "FLASHATTN_CUDA_ARCHS" -- bash -c 'echo "nvcc fatal   : Unsupported gpu architecture compute_75" >&2; exit 1'
expect names_the_file 1 "compiling src/x.cu failed" -- bash -c 'exit 1' -c src/x.cu
expect keeps_the_error 1 "error: expected ;" -- bash -c 'echo "error: expected ;" >&2; exit 1'
[ "$failures" -eq 0 ] && echo "explain_failure: all cases pass" || { echo "explain_failure: $failures failed"; exit 1; }
