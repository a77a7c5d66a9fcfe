#!/usr/bin/env bash
# scratch: two splits on the 128-unit 4k grids with the whole ring (FLASHATTN_KVC_AHEAD=0) against the rule's one tile
# ahead and one split, after each flush
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
S=$root/bench/decode_splits.py
M="--env a0=FLASHATTN_KVC_AHEAD:0 --env a2=FLASHATTN_KVC_AHEAD:2"
SH="16:8:4096:16 16:8:4096 16:8:4096:64 4:32:4096:16 4:32:4096"
timeout 60 python3 $S --shapes $SH --splits 0 2 $M > $L/a_memset.txt 2>&1; el "a rc $?"
timeout 60 python3 $S --shapes $SH --splits 0 2 $M > $L/b_memset.txt 2>&1; el "b rc $?"
FLASHATTN_BENCH_FLUSH=read timeout 60 python3 $S --shapes $SH --splits 0 2 $M > $L/c_read.txt 2>&1; el "c rc $?"
el done
