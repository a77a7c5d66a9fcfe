#!/usr/bin/env bash
# scratch: cp.async copies with the table read a tile ahead (COPY_THREADS=1) and without the consumers' proxy fence (2)
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=10 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?" ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && cmake --build /tmp/b -j 6 --target test_kernels >> $L/cmake.log 2>&1; el "cmake rc $?" ) &
wait; el built
/tmp/b/tests/test_kernels --gtest_filter='GpuKvcLean*' > $L/gtest_lean.log 2>&1; el "gtest lean rc $? $(grep -a 'PASSED\|FAILED' $L/gtest_lean.log | head -3 | tr '\n' ' ')"
cd /tmp; export PYTHONPATH=/tmp/site
timeout 120 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -k "tiles_copied_by_threads" -n 8 > $L/pytest_ct.log 2>&1; el "pytest ct rc $? $(tail -1 $L/pytest_ct.log)"
S=$root/bench/decode_splits.py
M="--env ct=FLASHATTN_KVC_COPY_THREADS:1 --env nf=FLASHATTN_KVC_COPY_THREADS:2"
SH="16:8:4096:16 4:32:4096:16 16:8:4096 16:8:4096:64 4:8:1024:16 4:8:16384:16 16:8:16384:16"
timeout 100 python3 $S --shapes $SH --splits 0 $M > $L/a_memset.txt 2>&1; el "a rc $?"
timeout 100 python3 $S --shapes $SH --splits 0 $M > $L/b_memset.txt 2>&1; el "b rc $?"
el done
