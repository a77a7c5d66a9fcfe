#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build with all cores, run every test (GPU tests included), compute-sanitizer
# memcheck on a reduced GPU set, and the benchmark. Logs and the results JSON go to $OUT (default ./out); a short
# summary is printed last.
#   FLASHATTN_CUDA_ARCHS   GPU targets to build (default: this GPU's, e.g. 90a on an H100)
#   FLASHATTN_BENCH_ARGS   extra arguments for bench/bench_sweep.py and bench/bench_python.py (e.g. "--quick")
#   FLASHATTN_DECODE_ARGS  arguments for bench/bench_decode.py (default "--quick"; "" for the whole decode sweep)
# One call of the device tool may run 10 minutes: with every step on, pass --quick to the benchmarks or skip some.
#   FLASHATTN_SKIP_BENCH=1 / FLASHATTN_SKIP_MEMCHECK=1 / FLASHATTN_SKIP_PYTHON=1   skip those steps
#   FLASHATTN_SKIP_TRAINING_BENCH=1   of the benchmarks, run the decode one only
#   FLASHATTN_SKIP_PYTHON_BENCH=1     skip bench/bench_python.py (the Python API training benchmark)
#   FLASHATTN_SKIP_DECODE_BENCH=1     skip bench/bench_decode.py
#   FLASHATTN_DECODE_AB=1   on compute capability 9.0, bench/bench_decode.py also with FLASHATTN_KVCACHE_PATH=sm80, then
#                           the default again
#   FLASHATTN_SHORT_Q_ARGS  arguments for bench/bench_short_q.py (default "--quick"; "" for all its shapes)
#   FLASHATTN_TEST_FILTER   a ctest -R regex (default: every test); FLASHATTN_PYTEST_ARGS  pytest's files and
#                           options (default: tests/python); FLASHATTN_PYTEST_STALL_S  seconds a test runs before
#                           pytest prints where it is (default 120)
#   FLASHATTN_NCU=1   also profile (Nsight Compute, where installed) one launch each of the Hopper forward at hd128
#                     8k and of the kv-cache kernel at decode batch 1: speed of light, warp stalls, pipes -> ncu_*.txt
#   FLASHATTN_FORWARD_VARIANTS  on compute capability 9.0, the forwards also swept beside the default, as
#                               "path:schedule[:persistent[:block_n]]" words (default "sm80:serial1
#                               sm90:specialised:0:128 sm90:specialised_free sm90:specialised:1")
# The Python package is installed with pip (no build isolation: the machine may be offline, so scikit-build-core and
# nanobind must be installed) into a folder of its own, and its tests and benchmark run against that installation
# under the machine's torch.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/out}
mkdir -p "$out"
build=${FLASHATTN_BUILD_DIR:-$root/build-gpu}
jobs=$(nproc)
export PYTHONUNBUFFERED=1
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
# The device returns at most 8 files from $OUT: at exit the text logs and the forward variants' JSON go into one
# archive, next to the summary and the main benchmarks' JSON and plot.
pack_logs() {
  (cd "$out" && shopt -s nullglob && logs=(*.log *.txt bench_sm80_*.json bench_sm90_*.json) && [ ${#logs[@]} -gt 0 ] &&
     tar czf logs.tar.gz --exclude=summary.txt "${logs[@]}" && for f in "${logs[@]}"; do
       [ "$f" = summary.txt ] || rm -f "$f"; done)
}
trap pack_logs EXIT

# Without FLASHATTN_COMMIT, the checkout's commit, marked "-dirty" where tracked files differ from it (a copied tree
# whose git metadata lags behind its files reads so, rather than as the older commit).
export FLASHATTN_COMMIT=${FLASHATTN_COMMIT:-$(git -C "$root" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)}

# ---- the machine -------------------------------------------------------------------------------------------------
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  echo "commit $FLASHATTN_COMMIT"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} > "$out/env.txt"
cat "$out/env.txt"

if [ -z "${FLASHATTN_CUDA_ARCHS:-}" ]; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  case "$cc" in 90) FLASHATTN_CUDA_ARCHS=90a ;; "") FLASHATTN_CUDA_ARCHS="80;90a" ;; *) FLASHATTN_CUDA_ARCHS=$cc ;; esac
fi

# GoogleTest: the system's, or a copy carried in .deps/gtest.
gtest_args=()
if [ -d "$root/.deps/gtest" ]; then
  gtest_args=(-DGTest_DIR="$root/.deps/gtest/lib/x86_64-linux-gnu/cmake/GTest")
fi

# ---- build ---------------------------------------------------------------------------------------------------------
t0=$(date +%s)
if cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS="$FLASHATTN_CUDA_ARCHS" \
     -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON "${gtest_args[@]}" > "$out/build.log" 2>&1 &&
   cmake --build "$build" -j "$jobs" >> "$out/build.log" 2>&1; then
  note "build: ok in $(( $(date +%s) - t0 )) s (archs $FLASHATTN_CUDA_ARCHS, $jobs jobs)"
else
  note "build: FAILED after $(( $(date +%s) - t0 )) s; the end of build.log:"
  tail -40 "$out/build.log"
  exit 1
fi

# ---- tests ---------------------------------------------------------------------------------------------------------
t0=$(date +%s)
# GPU tests share the one GPU; several at once keep the 16 cores busy with the CPU oracle.
ctest --test-dir "$build" --output-on-failure -j "${FLASHATTN_TEST_JOBS:-8}" --timeout 300 \
  ${FLASHATTN_TEST_FILTER:+-R "$FLASHATTN_TEST_FILTER"} > "$out/test.log" 2>&1
test_rc=$?
grep -qE 'tests passed|tests failed' "$out/test.log" || { note "tests: ctest found none (a build folder configured without them?)"; test_rc=1; }
note "tests: $(grep -E 'tests passed|tests failed' "$out/test.log" | tail -1) in $(( $(date +%s) - t0 )) s (rc $test_rc)"
grep -E '^\s+[0-9]+ - .*(Failed|Not Run|Timeout)' "$out/test.log" | head -40 | tee -a "$summary"
note "skipped: $(grep -c 'Skipped' "$out/test.log" || true)"

# ---- compute capability 9.0: the Hopper forward is the default there; the forward suites again on the Ampere path --
cc_now=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
if [ "$cc_now" = 90 ]; then
  t0=$(date +%s)
  FLASHATTN_FORWARD_PATH=sm80 FLASHATTN_FORWARD_PACKED=0 ctest --test-dir "$build" --output-on-failure -j "${FLASHATTN_TEST_JOBS:-8}" \
    --timeout 120 -R 'GpuForward\.|GpuEdge|GpuLse|GpuBackward|GpuVarlen|GpuDropout|GpuAttnProbs|GpuDeterministic' > "$out/test_sm80.log" 2>&1
  note "tests with FLASHATTN_FORWARD_PATH=sm80 FLASHATTN_FORWARD_PACKED=0: $(grep -E 'tests passed|tests failed' "$out/test_sm80.log" | tail -1) in $(( $(date +%s) - t0 )) s"
  grep -E '^\s+[0-9]+ - .*(Failed|Not Run|Timeout)' "$out/test_sm80.log" | head -20 | tee -a "$summary"
  t0=$(date +%s)
  FLASHATTN_KVCACHE_PATH=sm80 ctest --test-dir "$build" --output-on-failure -j "${FLASHATTN_TEST_JOBS:-8}" \
    --timeout 120 -R 'GpuKvc|Kvc|KvCache' > "$out/test_kvc_sm80.log" 2>&1
  note "kv-cache tests with FLASHATTN_KVCACHE_PATH=sm80: $(grep -E 'tests passed|tests failed' "$out/test_kvc_sm80.log" | tail -1) in $(( $(date +%s) - t0 )) s"
  grep -E '^\s+[0-9]+ - .*(Failed|Not Run|Timeout)' "$out/test_kvc_sm80.log" | head -20 | tee -a "$summary"
  if command -v cuobjdump >/dev/null; then
    fwd90_obj="$build/CMakeFiles/flashattn_objects.dir/src/kernels/sm90/fwd_launch.cu.o"
    note "HGMMA instructions in the Hopper forward: $(cuobjdump -sass "$fwd90_obj" 2>/dev/null | grep -c HGMMA)"
    # Where ptxas put each main loop's P V wait (bench/NOTES_sm90.md v17): exponentials before it / in the loop.
    cuobjdump -sass "$fwd90_obj" 2>/dev/null | python3 "$root/scripts/sass_pv_wait.py" --issue > "$out/sass_pv_wait.txt" 2>&1
    note "exponentials before the P V wait / in the main loop, and the issue path (barrier to first product + first to last; P V wait to the step's end), bf16: $(grep '^bf16' "$out/sass_pv_wait.txt" | paste -sd ';' - | sed 's/;/; /g')"
  fi
fi

# ---- the Python package, installed as a user installs it -----------------------------------------------------------
py_rc=0
py_usable=0  # installed and importable without a crash: the Python benchmarks can run
if [ "${FLASHATTN_SKIP_PYTHON:-0}" != 1 ]; then
  site=${FLASHATTN_PY_SITE:-/tmp/flashattn-site}
  rm -rf "$site"
  t0=$(date +%s)
  if FLASHATTN_CUDA_ARCHS="$FLASHATTN_CUDA_ARCHS" CMAKE_BUILD_PARALLEL_LEVEL=$jobs python3 -m pip install -v \
       --no-build-isolation --no-deps --target "$site" "$root" > "$out/pip_install.log" 2>&1; then
    note "python: pip install ok in $(( $(date +%s) - t0 )) s"
    # From outside the source tree, so that the installed package is imported.
    (cd /tmp && PYTHONPATH="$site" python3 -X faulthandler -m flashattn doctor > "$out/doctor.txt" 2>&1)
    doctor_rc=$?
    [ "$doctor_rc" -le 128 ] && py_usable=1
    note "python: doctor rc $doctor_rc ($(grep -c '^  [0-9]*\. ' "$out/doctor.txt" || true) problems)"
    # A crash (signal) rather than a report: the native backtrace, where a debugger is installed.
    if [ "$doctor_rc" -gt 128 ] && command -v cuda-gdb >/dev/null; then
      (cd /tmp && PYTHONPATH="$site" timeout 120 cuda-gdb -batch -ex run -ex bt -ex "info sharedlibrary" \
         --args python3 -m flashattn doctor > "$out/doctor_backtrace.txt" 2>&1)
      note "python: the doctor's backtrace is in doctor_backtrace.txt"
    fi
    t0=$(date +%s)
    # A test still running after $stall_s seconds prints every thread's stack (where it waits), and the slowest ten
    # are listed at the end: a suite that outgrows a call's time limit says which test it was in.
    stall_s=${FLASHATTN_PYTEST_STALL_S:-120}
    (cd /tmp && PYTHONPATH="$site" python3 -m pytest ${FLASHATTN_PYTEST_ARGS:-"$root/tests/python"} -q \
       -p no:cacheprovider --rootdir "$root" -o faulthandler_timeout=$stall_s --durations=10 \
       > "$out/pytest.log" 2>&1)
    py_rc=$?
    note "python: pytest $(tail -1 "$out/pytest.log") (rc $py_rc, $(( $(date +%s) - t0 )) s)"
    grep -E '^(FAILED|ERROR)' "$out/pytest.log" | head -30 | tee -a "$summary"
    if [ "$cc_now" = 90 ]; then  # the kv-cache suites again on the Ampere-class kv-cache kernel
      (cd /tmp && FLASHATTN_KVCACHE_PATH=sm80 PYTHONPATH="$site" python3 -m pytest "$root/tests/python/test_kvcache.py" \
         "$root/tests/python/test_merge.py" -q -p no:cacheprovider --rootdir "$root" -o faulthandler_timeout=$stall_s \
         --durations=10 > "$out/pytest_kvc_sm80.log" 2>&1)
      note "python: kv-cache tests with FLASHATTN_KVCACHE_PATH=sm80: $(tail -1 "$out/pytest_kvc_sm80.log") (rc $?)"
    fi
  else
    py_rc=1
    note "python: pip install FAILED after $(( $(date +%s) - t0 )) s; the end of pip_install.log:"
    tail -30 "$out/pip_install.log"
  fi
fi

# ---- memcheck on a reduced set -------------------------------------------------------------------------------------
if [ "${FLASHATTN_SKIP_MEMCHECK:-0}" != 1 ] && command -v compute-sanitizer >/dev/null; then
  t0=$(date +%s)
  compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/test_kernels" \
    --gtest_filter="${FLASHATTN_MEMCHECK_FILTER:-GpuVarlen*:GpuEdgeCases.*:GpuLse.*:GpuAttnProbs.*}" \
    > "$out/memcheck.log" 2>&1
  note "memcheck: rc $? in $(( $(date +%s) - t0 )) s; $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)"
  # The kv-cache kernels (append, paged gathers, split-KV combine) through the installed Python package.
  if [ "$py_usable" -eq 1 ]; then
    t0=$(date +%s)
    (cd /tmp && PYTHONPATH="$site" compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest \
       "$root/tests/python/test_kvcache.py" -q -p no:cacheprovider --rootdir "$root" \
       -k "cuda and (paged or split or no_key)" > "$out/memcheck_kvcache.log" 2>&1)
    note "memcheck kv-cache: rc $? in $(( $(date +%s) - t0 )) s; $(grep -E 'ERROR SUMMARY' "$out/memcheck_kvcache.log" | tail -1)"
  fi
fi

# ---- benchmark -------------------------------------------------------------------------------------------------------
if [ "${FLASHATTN_SKIP_BENCH:-0}" != 1 ] && [ "${FLASHATTN_SKIP_TRAINING_BENCH:-0}" != 1 ]; then
  t0=$(date +%s)
  python3 "$root/bench/bench_sweep.py" --lib "$build/libflashattn.so" --json "$out/bench.json" \
    ${FLASHATTN_BENCH_ARGS:-} > "$out/bench.log" 2>&1
  note "bench: rc $? in $(( $(date +%s) - t0 )) s"
  tail -60 "$out/bench.log"
  if [ "$cc_now" = 90 ]; then  # the other forward shapes for comparison (the backward rows repeat)
    for variant in ${FLASHATTN_FORWARD_VARIANTS:-"sm80:serial1" "sm90:specialised:0:128" "sm90:specialised_free" "sm90:specialised:1"}; do
      IFS=: read -r path schedule persistent block_n <<< "$variant"
      persistent=${persistent:-0}
      name="bench_${path}_${schedule}_p${persistent}${block_n:+_n$block_n}"
      t0=$(date +%s)
      FLASHATTN_FORWARD_PATH=$path FLASHATTN_SM90_SCHEDULE=$schedule FLASHATTN_SM90_PERSISTENT=$persistent \
        FLASHATTN_SM90_BLOCK_N=${block_n:-} timeout 300 \
        python3 "$root/bench/bench_sweep.py" --lib "$build/libflashattn.so" --json "$out/$name.json" --forward-only \
        ${FLASHATTN_BENCH_ARGS:-} > "$out/$name.log" 2>&1
      note "bench, FLASHATTN_FORWARD_PATH=$path FLASHATTN_SM90_SCHEDULE=$schedule FLASHATTN_SM90_PERSISTENT=$persistent FLASHATTN_SM90_BLOCK_N=${block_n:-}: rc $? in $(( $(date +%s) - t0 )) s"
      grep -E 'geometric' "$out/$name.log" | tee -a "$summary"
    done
  fi
fi
# The host's time in a kv-cache call, part by part, from C++ (bench/host_path.cu).
if [ "${FLASHATTN_SKIP_BENCH:-0}" != 1 ]; then
  if nvcc -O2 -std=c++17 -I"$root/include" "$root/bench/host_path.cu" -L"$build" -lflashattn \
       -Xlinker -rpath="$build" -o /tmp/flashattn-host-path > "$out/host_path.log" 2>&1; then
    # Kernel attributes remembered per context (the default), then set before every launch, then the default again:
    # one host, so the calls' times compare (src/kernels/common/func_attributes.h).
    for every_call in 0 1 0; do
      echo "== FLASHATTN_FUNC_ATTRIBUTES_EVERY_CALL=$every_call" >> "$out/host_path.log"
      FLASHATTN_FUNC_ATTRIBUTES_EVERY_CALL=$every_call timeout 120 /tmp/flashattn-host-path >> "$out/host_path.log" 2>&1
      note "host path (FLASHATTN_FUNC_ATTRIBUTES_EVERY_CALL=$every_call): rc $?"
    done
    tee -a "$summary" < "$out/host_path.log" > /dev/null
  else
    note "host path: build failed (host_path.log)"
  fi
fi
# The Python API's benchmark (the installed package, autograd and allocation included), with its plot.
if [ "${FLASHATTN_SKIP_BENCH:-0}" != 1 ] && [ "$py_usable" -eq 1 ]; then
  if [ "${FLASHATTN_SKIP_TRAINING_BENCH:-0}" != 1 ] && [ "${FLASHATTN_SKIP_PYTHON_BENCH:-0}" != 1 ]; then
    t0=$(date +%s)
    (cd /tmp && PYTHONPATH="$site" python3 "$root/bench/bench_python.py" --out "$out" ${FLASHATTN_BENCH_ARGS:-} \
       > "$out/bench_python.log" 2>&1)
    note "bench_python: rc $? in $(( $(date +%s) - t0 )) s"
    tail -8 "$out/bench_python.log"
  fi
  if [ "${FLASHATTN_SKIP_DECODE_BENCH:-0}" != 1 ]; then
    # KV-cache decode against SDPA, with the device copy bandwidth of the same run.
    t0=$(date +%s)
    (cd /tmp && PYTHONPATH="$site" python3 "$root/bench/bench_decode.py" --out "$out" ${FLASHATTN_DECODE_ARGS---quick} \
       > "$out/bench_decode.log" 2>&1)
    note "bench_decode: rc $? in $(( $(date +%s) - t0 )) s"
    tail -20 "$out/bench_decode.log"
    if [ "${FLASHATTN_DECODE_AB:-0}" = 1 ]; then  # the same on the Ampere-class kv-cache kernel, then the default again
      mkdir -p "$out/decode_sm80" "$out/decode_again"
      (cd /tmp && FLASHATTN_KVCACHE_PATH=sm80 PYTHONPATH="$site" python3 "$root/bench/bench_decode.py" \
         --out "$out/decode_sm80" ${FLASHATTN_DECODE_ARGS---quick} > "$out/bench_decode_sm80.log" 2>&1)
      (cd /tmp && PYTHONPATH="$site" python3 "$root/bench/bench_decode.py" --out "$out/decode_again" \
         ${FLASHATTN_DECODE_ARGS---quick} > "$out/bench_decode_again.log" 2>&1)
      note "bench_decode A/B: $(grep -E '^geometric' "$out/bench_decode.log") | sm80: $(grep -E '^geometric' "$out/bench_decode_sm80.log") | again: $(grep -E '^geometric' "$out/bench_decode_again.log")"
    fi
    # Paged against dense with the dense cache's own addresses (block tables in pool order): the paged path's cost
    # apart from where random pages land.
    (cd /tmp && PYTHONPATH="$site" python3 "$root/bench/bench_decode.py" --out /tmp/flashattn-decode-sequential \
       --quick --batches 64 --seqlens-q 1 --page-order sequential > "$out/bench_decode_sequential.log" 2>&1)
    note "bench_decode, pages in pool order: rc $?; $(grep -E '^geometric' "$out/bench_decode_sequential.log")"
  fi
  # Short query rows through the forward: packed query heads against the tiled forward, SDPA beside them.
  t0=$(date +%s)
  (cd /tmp && PYTHONPATH="$site" timeout 300 python3 "$root/bench/bench_short_q.py" --out "$out" \
     ${FLASHATTN_SHORT_Q_ARGS---quick} > "$out/bench_short_q.log" 2>&1)
  note "bench_short_q: rc $? in $(( $(date +%s) - t0 )) s; $(grep -E '^default within' "$out/bench_short_q.log")"
fi

# ---- profiles (optional) -----------------------------------------------------------------------------------------------
if [ "${FLASHATTN_NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
  sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
            --section WarpStateStats --section SchedulerStats --section Occupancy)
  t0=$(date +%s)
  timeout 300 ncu --clock-control none "${sections[@]}" --kernel-name regex:fwd_sm90 --launch-skip 3 --launch-count 1 \
    python3 "$root/bench/bench_sweep.py" --lib "$build/libflashattn.so" --quick --hdims 128 --forward-only \
    > "$out/ncu_fwd_sm90.txt" 2>&1
  note "ncu, Hopper forward: rc $? in $(( $(date +%s) - t0 )) s (ncu_fwd_sm90.txt)"
  if [ "$py_usable" -eq 1 ]; then
    t0=$(date +%s)
    (cd /tmp && PYTHONPATH="$site" timeout 300 ncu --clock-control none "${sections[@]}" --kernel-name regex:kvcache --launch-skip 5 \
       --launch-count 2 python3 "$root/bench/bench_decode.py" --out /tmp/flashattn-decode-ncu --quick --batches 1 \
       --seqlens-q 1 > "$out/ncu_kvcache.txt" 2>&1)
    note "ncu, kv-cache: rc $? in $(( $(date +%s) - t0 )) s (ncu_kvcache.txt)"
  fi
fi

echo "==== summary"
cat "$summary"
[ "$test_rc" -eq 0 ] && exit $py_rc
exit $test_rc
