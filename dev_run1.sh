#!/usr/bin/env bash
# scratch: FLASHATTN_KVC_SHARE_AHEAD (each block prefetching its share of every kv head's rows into L2) against the tree
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
S=$root/bench/decode_splits.py
M="--env s2=FLASHATTN_KVC_SHARE_AHEAD:2 --env s4=FLASHATTN_KVC_SHARE_AHEAD:4 --env s8=FLASHATTN_KVC_SHARE_AHEAD:8"
SH="16:8:4096 16:8:4096:16 16:8:4096:64 4:32:4096:16 16:32:4096:16 64:8:1024:16 64:32:1024:16 1:8:4096:16 4:8:1024:16 16:8:16384:16 64:8:16384:16 64:8:16384"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 120 python3 $S --shapes $SH --splits 0 $M > $L/a_memset.txt 2> $L/a_plans.txt; el "a rc $?"
timeout 100 python3 $S --shapes 16:8:65536:16 4:32:65536:16 16:8:65536 4:8:65536:16 --splits 0 $M > $L/b_64k.txt 2>&1; el "b rc $?"
timeout 100 python3 $S --shapes $SH --splits 0 $M > $L/c_memset.txt 2>&1; el "c rc $?"
FLASHATTN_BENCH_FLUSH=read timeout 100 python3 $S --shapes $SH --splits 0 $M > $L/d_read.txt 2>&1; el "d rc $?"
timeout 60 python3 $S --seqlen-q 4 --shapes 16:8:4096:16 4:32:4096:16 64:8:1024:16 16:8:4096 --splits 0 $M > $L/e_q4.txt 2>&1; el "e rc $?"
el done
