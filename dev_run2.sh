#!/usr/bin/env bash
# scratch: compute-sanitizer memcheck over the kv-cache suites at HEAD, then the decode sweep again
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=10 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; echo pip rc $? >> $L/steps.txt ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && cmake --build /tmp/b -j 6 >> $L/cmake.log 2>&1; echo cmake rc $? >> $L/steps.txt ) &
wait; el built
cd /tmp; export PYTHONPATH=/tmp/site
lim=$(( 480 - ($(date +%s) - t0) ))
for t in test_kernels test_api; do
  ( timeout $lim compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/b/tests/$t --gtest_filter='GpuKvc*:Kvc*:*KvCache*' > $L/memcheck_$t.log 2>&1; el "memcheck $t rc $? $(grep -a 'ERROR SUMMARY' $L/memcheck_$t.log | tail -1) $(grep -a 'PASSED\|FAILED' $L/memcheck_$t.log | tail -2 | tr '\n' ' ')" ) &
done
( timeout $lim compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -rfE -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -k "cuda and (paged or split or no_key or last_block or fitted or append)" > $L/memcheck_py.log 2>&1; el "memcheck pytest rc $? $(grep -a 'ERROR SUMMARY' $L/memcheck_py.log | tail -1) $(tail -1 $L/memcheck_py.log)" ) &
wait
left=$(( 585 - ($(date +%s) - t0) )); el "left $left"
if [ $left -gt 45 ]; then timeout $left python3 $root/bench/bench_decode.py --out $L/sweep > $L/sweep.log 2>&1; el "sweep rc $?"; fi
el done
