#!/usr/bin/env bash
# scratch: every suite at the tree (lean instances for one and several kv heads a block); A/B of the grouped lean
# instance against the general one (FLASHATTN_KVC_LEAN_GROUPS=0) and of the one-head calls on it (FLASHATTN_KVC_LEAN=groups); the sweep
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
timeout 45 python3 $S --shapes 64:8:1024:16 64:8:1024 64:8:4096:16 16:32:1024:16 16:32:4096:16 16:32:4096 64:32:1024:16 --splits 0 --env gen=FLASHATTN_KVC_LEAN_GROUPS:0 > $L/ab_groups.txt 2>&1; el "ab groups rc $?"
timeout 30 python3 $S --shapes 1:8:1024 1:8:1024:16 4:8:4096 16:8:4096:16 16:8:4096 --splits 0 --env lg=FLASHATTN_KVC_LEAN:groups > $L/ab_one.txt 2>&1; el "ab one rc $?"
lim=$(( 330 - ($(date +%s) - t0) ))
( timeout $lim ctest --test-dir /tmp/b -j 6 --output-on-failure > $L/ctest.log 2>&1; el "ctest rc $? $(grep -a 'tests passed\|tests failed' $L/ctest.log)" ) &
( timeout $lim python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python -n 10 --durations=15 > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)" ) &
wait
/tmp/b/tests/test_kernels --gtest_filter='GpuKvcLean*' > $L/gtest_lean.log 2>&1; el "gtest lean rc $?"
timeout 55 python3 $root/bench/bench_decode.py --out $L/sweep > $L/sweep.log 2>&1; el "sweep rc $?"
el done
