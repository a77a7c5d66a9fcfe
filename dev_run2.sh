#!/usr/bin/env bash
# scratch: the lean instance with the short Q gather and the 8-at-a-time merge (default) against the old lean instance
# (2), the unrolled 8-split merge (3) and the general instance (0) after each flush; every suite; the sweeps
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=10 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?" ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && cmake --build /tmp/b -j 6 >> $L/cmake.log 2>&1; el "cmake rc $?" ) &
wait; el built
cd /tmp; export PYTHONPATH=/tmp/site
S=$root/bench/decode_splits.py
M="--env old=FLASHATTN_KVC_LEAN:2 --env u8=FLASHATTN_KVC_LEAN:3 --env g=FLASHATTN_KVC_LEAN:0"
SH="1:8:1024 1:8:1024:16 1:8:4096 1:8:4096:16 1:8:4096:64 1:32:1024 4:8:1024 4:8:4096 2:8:4096 16:8:4096 16:8:4096:16 4:32:4096:16"
timeout 60 python3 $S --shapes $SH --splits 0 $M > $L/a_memset.txt 2>&1; el "a rc $?"
FLASHATTN_BENCH_FLUSH=read timeout 60 python3 $S --shapes $SH --splits 0 $M > $L/b_read.txt 2>&1; el "b rc $?"
timeout 60 python3 $S --shapes $SH --splits 0 $M > $L/c_memset.txt 2>&1; el "c rc $?"
timeout 50 python3 $S --seqlen-q 4 --shapes 1:8:1024:16 1:8:4096 4:8:4096 1:32:1024 16:8:4096 --splits 0 $M > $L/d_q4.txt 2>&1; el "d rc $?"
lim=$(( 420 - ($(date +%s) - t0) ))
( timeout $lim ctest --test-dir /tmp/b -j 6 --output-on-failure > $L/ctest.log 2>&1; el "ctest rc $? $(grep -a 'tests passed\|tests failed' $L/ctest.log)" ) &
( timeout $lim python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python -n 10 --durations=15 > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)" ) &
wait
/tmp/b/tests/test_kernels --gtest_filter='GpuKvcLean*' > $L/gtest_lean.log 2>&1; el "gtest lean rc $?"
timeout 60 python3 $root/bench/bench_decode.py --out $L/sweep > $L/sweep.log 2>&1; el "sweep rc $?"
FLASHATTN_BENCH_FLUSH=read timeout 60 python3 $root/bench/bench_decode.py --out $L/sweep_read > $L/sweep_read.log 2>&1; el "sweep read rc $?"
el done
