#!/usr/bin/env bash
# scratch: the lean instance's tiles copied by a producer warpgroup's cp.async (FLASHATTN_KVC_COPY_THREADS=1):
# its tests, then A/B against the copy engine, then every suite
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=10 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?" ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && cmake --build /tmp/b -j 6 >> $L/cmake.log 2>&1; el "cmake rc $?" ) &
wait; el built
/tmp/b/tests/test_kernels --gtest_filter='GpuKvcLean*' > $L/gtest_lean.log 2>&1; el "gtest lean rc $? $(grep -a 'PASSED\|FAILED' $L/gtest_lean.log | head -3 | tr '\n' ' ')"
cd /tmp; export PYTHONPATH=/tmp/site
timeout 120 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -k "tiles_copied_by_threads" -n 8 > $L/pytest_ct.log 2>&1; el "pytest ct rc $? $(tail -1 $L/pytest_ct.log)"
S=$root/bench/decode_splits.py
M="--env ct=FLASHATTN_KVC_COPY_THREADS:1"
SH="16:8:4096:16 4:32:4096:16 16:8:4096 16:8:4096:64 16:8:4096:256 4:32:4096 1:8:4096:16 1:8:1024:16 4:8:1024:16 1:32:1024:16 4:8:16384:16 1:32:16384:16 16:8:16384:16 16:8:65536:16 4:8:65536:16"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 100 python3 $S --shapes $SH --splits 0 $M > $L/a_memset.txt 2> $L/a_plans.txt; el "a rc $?"
timeout 100 python3 $S --shapes $SH --splits 0 $M > $L/b_memset.txt 2>&1; el "b rc $?"
FLASHATTN_BENCH_FLUSH=read timeout 100 python3 $S --shapes $SH --splits 0 $M > $L/c_read.txt 2>&1; el "c rc $?"
timeout 60 python3 $S --seqlen-q 4 --shapes 16:8:4096:16 4:32:4096:16 1:8:4096:16 4:8:16384:16 --splits 0 $M > $L/d_q4.txt 2>&1; el "d rc $?"
lim=$(( 500 - ($(date +%s) - t0) ))
( timeout $lim ctest --test-dir /tmp/b -j 6 --output-on-failure > $L/ctest.log 2>&1; el "ctest rc $? $(grep -a 'tests passed\|tests failed' $L/ctest.log)" ) &
( FLASHATTN_KVC_COPY_THREADS=1 timeout $lim python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -n 10 > $L/pytest_kvc_ct.log 2>&1; el "pytest kvc under COPY_THREADS rc $? $(tail -1 $L/pytest_kvc_ct.log)" ) &
wait
el done
