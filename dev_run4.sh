#!/usr/bin/env bash
# scratch: split counts on the 128-unit 4k grids and the 512-unit 1k page-16 grids (the kernel, with its plans), and the
# copy probe on 16 x 8 x 4k at 1, 2 and 4 splits in one process each
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/probe_kv_stream.cu -o /tmp/probe > $L/probe_build.log 2>&1; el "probe build rc $?" ) &
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=15 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
wait
for s in 1 2 4; do timeout 30 /tmp/probe 16 4096 8 0 $s > $L/probe_16x8_s$s.txt 2>&1; el "probe $s rc $?"; done
cd /tmp; export PYTHONPATH=/tmp/site
S=$root/bench/decode_splits.py
FLASHATTN_KVC_PRINT_PLAN=1 timeout 90 python3 $S --shapes 16:8:4096:16 16:8:4096 4:32:4096:16 --splits 0 1 2 3 4 8 > $L/a_splits.txt 2> $L/a_plans.txt; el "a rc $?"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 90 python3 $S --shapes 64:8:1024:16 16:32:1024:16 64:32:1024:16 --splits 0 1 2 4 > $L/b_splits.txt 2> $L/b_plans.txt; el "b rc $?"
el done
