#!/usr/bin/env bash
# scratch: what the paged path costs where the page order does not matter (pages of 64 and 256 on the 128-unit 64k
# grids, 64 x 32 x 1k page 16): the plan's ring depth, producers and folded copies against dense
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site FLASHATTN_KVC_PRINT_PLAN=1
S=$root/bench/decode_splits.py
timeout 200 python3 $S --shapes 16:8:65536 16:8:65536:64 16:8:65536:256 4:32:65536 4:32:65536:64 4:32:65536:256 \
    --splits 0 --env a1=FLASHATTN_KVC_AHEAD:1 --env a0=FLASHATTN_KVC_AHEAD:0 --env op1=FLASHATTN_KVC_ONE_PRODUCER:1 \
    --env a1op1=FLASHATTN_KVC_AHEAD:1,FLASHATTN_KVC_ONE_PRODUCER:1 --env vf0=FLASHATTN_KVC_V_FOLD:0 \
    --json $L/a.json > $L/a.txt 2> $L/a_plans.txt; el "a rc $?"
timeout 150 python3 $S --shapes 16:8:4096 16:8:4096:64 16:8:4096:256 64:32:1024 64:32:1024:16 64:32:1024:64 \
    --splits 0 --env a1=FLASHATTN_KVC_AHEAD:1 --env a0=FLASHATTN_KVC_AHEAD:0 --env op1=FLASHATTN_KVC_ONE_PRODUCER:1 \
    --env op0=FLASHATTN_KVC_ONE_PRODUCER:0 --env vf0=FLASHATTN_KVC_V_FOLD:0 --env kf0=FLASHATTN_KVC_K_FOLD:0 \
    --json $L/b.json > $L/b.txt 2> $L/b_plans.txt; el "b rc $?"
el done
