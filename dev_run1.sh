#!/usr/bin/env bash
# scratch: early fetches (FLASHATTN_KVC_PREFETCH) after both flushes; two-split page-16 grids through the combine
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
S=$root/bench/decode_splits.py
PF="--env pf1=FLASHATTN_KVC_PREFETCH:1 --env pf2=FLASHATTN_KVC_PREFETCH:2 --env pf3=FLASHATTN_KVC_PREFETCH:3"
FLASHATTN_BENCH_FLUSH=read timeout 120 python3 $S --shapes 1:8:1024 1:8:4096 1:8:1024:16 16:8:4096 --splits 0 --warm-code --touch $PF > $L/a_readflush.txt 2>&1; el "a rc $?"
timeout 150 python3 $S --shapes 16:8:4096 16:8:4096:16 4:32:4096:16 1:8:1024 1:8:4096 1:8:1024:16 64:8:1024 4:8:65536:16 1:32:65536:16 --splits 0 $PF > $L/b_zeroflush.txt 2>&1; el "b rc $?"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 120 python3 $S --shapes 16:8:16384:16 16:8:65536:16 64:8:16384:16 16:8:16384 --splits 0 --env comb=FLASHATTN_KVC_CLUSTER:0 --env combbal=FLASHATTN_KVC_CLUSTER:0,FLASHATTN_KVC_BALANCE:2 --env combbal4=FLASHATTN_KVC_CLUSTER:0,FLASHATTN_KVC_BALANCE:4 > $L/c_twosplit.txt 2> $L/c_plans.txt; el "c rc $?"
el done
