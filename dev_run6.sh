#!/usr/bin/env bash
# scratch: one tile ahead (as dense) against the whole ring on paged grids of several kv heads a block with long
# pieces (pages of 64 and 256), and the plans they get
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
S=$root/bench/decode_splits.py
V="--splits 0 --env a1=FLASHATTN_KVC_AHEAD:1 --env a0=FLASHATTN_KVC_AHEAD:0"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 150 python3 $S --shapes 64:32:1024:64 64:32:1024:256 64:32:4096:64 64:32:4096:256 \
    16:32:1024:64 16:32:4096:64 16:32:4096:256 16:32:16384:64 64:8:1024:64 64:8:4096:256 64:8:16384:64 \
    4:32:4096:64 4:32:16384:256 16:8:16384:64 16:8:4096:256 $V > $L/a.txt 2> $L/a_plans.txt; el "a rc $?"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 80 python3 $S --seqlen-q 4 --shapes 64:32:1024:64 64:32:4096:256 16:32:4096:64 64:8:4096:256 \
    16:8:16384:64 $V > $L/b.txt 2> $L/b_plans.txt; el "b rc $?"
el done
