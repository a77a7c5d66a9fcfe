#!/usr/bin/env bash
# scratch: where the paged calls' misses come from at the current code: the whole sweep with the pool's pages in a
# random order (the standard), in order (the dense cache's addresses), and random again, one after the other on one
# machine; the copy probe on the 128-unit grids
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=14 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?" ) &
( nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/probe_kv_stream.cu -o /tmp/probe -lcuda > $L/nvcc.log 2>&1; el "nvcc rc $?" ) &
wait; el built
cd /tmp; export PYTHONPATH=/tmp/site
B=$root/bench/bench_decode.py
timeout 70 python3 $B --out $L/random1 > $L/random1.log 2>&1; el "random1 rc $?"
timeout 70 python3 $B --page-order sequential --out $L/sequential > $L/sequential.log 2>&1; el "sequential rc $?"
timeout 70 python3 $B --out $L/random2 > $L/random2.log 2>&1; el "random2 rc $?"
timeout 70 python3 $B --page-order local --out $L/local > $L/local.log 2>&1; el "local rc $?"
for cfg in "16 8 4096 0 1" "16 8 4096 1 1" "16 8 65536 0 2" "16 8 65536 1 2" "4 8 65536 0 8" "64 8 4096 0 1"; do
    timeout 30 /tmp/probe $cfg > "$L/probe_${cfg// /_}.txt" 2>&1; el "probe $cfg rc $?"
done
el done
