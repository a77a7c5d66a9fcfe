#!/usr/bin/env bash
# scratch: run 1 read 64 x 8 x 1k paged 10% slower at the tree's code than the sweep at 0d7853e, and small paged calls
# 0.3-1 us slower; FLASHATTN_KVC_FLAT_POOL=1 read it as before. The library at 0d7853e (old_src, untracked) against
# this tree's, on one machine, interleaved
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/new . > $L/pip_new.log 2>&1; el "pip new rc $?" ) &
( cd old_src && FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/old . > $L/pip_old.log 2>&1; el "pip old rc $?" ) &
wait; el built
cd /tmp
SH="64:8:1024:16 64:8:1024:64 64:8:1024 1:8:4096:64 4:8:1024:64 1:32:1024:64 1:8:1024:64 1:8:1024 16:8:4096:16 16:8:4096 64:32:1024:16"
S="$root/bench/decode_splits.py --splits 0"
for r in 1 2; do
    PYTHONPATH=/tmp/old timeout 60 python3 $S --shapes $SH --json $L/old$r.json > $L/old$r.txt 2>&1; el "old$r rc $?"
    PYTHONPATH=/tmp/new timeout 60 python3 $S --env flat=FLASHATTN_KVC_FLAT_POOL:1 --shapes $SH --json $L/new$r.json > $L/new$r.txt 2>&1; el "new$r rc $?"
done
PYTHONPATH=/tmp/new FLASHATTN_KVC_PRINT_PLAN=1 timeout 30 python3 $S --env flat=FLASHATTN_KVC_FLAT_POOL:1 --shapes 64:8:1024:16 64:8:1024 > $L/plans_new.txt 2>&1; el "plans new rc $?"
PYTHONPATH=/tmp/old FLASHATTN_KVC_PRINT_PLAN=1 timeout 30 python3 $S --shapes 64:8:1024:16 64:8:1024 > $L/plans_old.txt 2>&1; el "plans old rc $?"
el done
