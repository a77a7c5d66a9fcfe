#!/usr/bin/env bash
# scratch: every suite at the tree; the decode sweeps after each flush; the copy probe on 16 x 8 x 4k with 4 splits
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=9 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?" ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && cmake --build /tmp/b -j 6 >> $L/cmake.log 2>&1; el "cmake rc $?" ) &
( nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/probe_kv_stream.cu -o /tmp/probe > $L/probe_build.log 2>&1; el "probe build rc $?" ) &
wait; el built
cd /tmp; export PYTHONPATH=/tmp/site
lim=$(( 300 - ($(date +%s) - t0) ))
( timeout $lim ctest --test-dir /tmp/b -j 6 --output-on-failure > $L/ctest.log 2>&1; el "ctest rc $? $(grep -a 'tests passed\|tests failed' $L/ctest.log)" ) &
( timeout $lim python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python -n 10 --durations=15 > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)" ) &
wait
/tmp/b/tests/test_kernels --gtest_filter='GpuKvcLean*' > $L/gtest_lean.log 2>&1; el "gtest lean rc $?"
timeout 60 python3 $root/bench/bench_decode.py --out $L/sweep > $L/sweep.log 2>&1; el "sweep rc $?"
FLASHATTN_BENCH_FLUSH=read timeout 60 python3 $root/bench/bench_decode.py --out $L/sweep_read > $L/sweep_read.log 2>&1; el "sweep read rc $?"
timeout 30 /tmp/probe 16 4096 8 0 4 > $L/probe_16x8_s4.txt 2>&1; el "probe rc $?"
el done
