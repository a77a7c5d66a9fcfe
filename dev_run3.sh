#!/usr/bin/env bash
# scratch: pages of 64 and 256 against dense: K's and V's folded copies off, alone and with the dense plan's ring
# and producer
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
S=$root/bench/decode_splits.py
V="--env kf0=FLASHATTN_KVC_K_FOLD:0 --env vf0=FLASHATTN_KVC_V_FOLD:0 --env kv0=FLASHATTN_KVC_K_FOLD:0,FLASHATTN_KVC_V_FOLD:0"
V="$V --env kv0op1=FLASHATTN_KVC_K_FOLD:0,FLASHATTN_KVC_V_FOLD:0,FLASHATTN_KVC_ONE_PRODUCER:1"
V="$V --env kv0a1op1=FLASHATTN_KVC_K_FOLD:0,FLASHATTN_KVC_V_FOLD:0,FLASHATTN_KVC_ONE_PRODUCER:1,FLASHATTN_KVC_AHEAD:1"
V="$V --env kf0op1=FLASHATTN_KVC_K_FOLD:0,FLASHATTN_KVC_ONE_PRODUCER:1"
timeout 200 python3 $S --shapes 16:8:65536 16:8:65536:256 16:8:65536:64 4:32:65536:256 16:8:4096 16:8:4096:256 16:8:4096:64 16:8:4096:16 \
    --splits 0 $V --json $L/a.json > $L/a.txt 2> $L/a.err; el "a rc $?"
timeout 100 python3 $S --shapes 16:8:65536 16:8:65536:256 16:8:4096 16:8:4096:256 --splits 0 $V --json $L/b.json > $L/b.txt 2> $L/b.err; el "b rc $?"
el done
