#!/usr/bin/env bash
# scratch: lean variants 2 (the unrolled 8-split merge alone) and 3 (also a short Q gather) against the lean (1) and
# general (0) instances after each flush; the copy probe on 16 x 8 and 4 x 32 x 4k; the kv-cache tests under variant 3
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/gpu.txt 2>&1
( nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/probe_kv_stream.cu -o /tmp/probe > $L/probe_build.log 2>&1; echo "probe build rc $?" >> $L/probe_build.log ) &
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=14 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
wait; el "probe $(tail -1 $L/probe_build.log)"
cd /tmp; export PYTHONPATH=/tmp/site
S=$root/bench/decode_splits.py
M="--env l2=FLASHATTN_KVC_LEAN:2 --env l3=FLASHATTN_KVC_LEAN:3 --env g=FLASHATTN_KVC_LEAN:0"
SH="1:8:1024 1:8:1024:16 1:8:1024:256 1:8:4096 1:32:1024 4:8:1024 4:8:4096 2:8:4096 16:8:4096 16:8:4096:16 4:32:4096:16"
timeout 110 python3 $S --shapes $SH --splits 0 $M > $L/a_memset.txt 2>&1; el "a rc $?"
FLASHATTN_BENCH_FLUSH=read timeout 110 python3 $S --shapes $SH --splits 0 $M > $L/b_read.txt 2>&1; el "b rc $?"
timeout 110 python3 $S --shapes $SH --splits 0 $M > $L/c_memset.txt 2>&1; el "c rc $?"
timeout 70 python3 $S --seqlen-q 4 --shapes 1:8:1024:16 4:8:4096 1:32:1024 16:8:4096 --splits 0 $M > $L/d_q4.txt 2>&1; el "d rc $?"
timeout 40 /tmp/probe 16 4096 8 > $L/probe_16x8.txt 2>&1; el "probe 16x8 rc $?"
timeout 40 /tmp/probe 4 4096 32 > $L/probe_4x32.txt 2>&1; el "probe 4x32 rc $?"
FLASHATTN_KVC_LEAN=3 timeout 170 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py $root/tests/python/test_merge.py -n 14 > $L/pytest_l3.log 2>&1; el "pytest l3 rc $? $(tail -1 $L/pytest_l3.log)"
el done
