#!/usr/bin/env bash
# scratch: plan switches on the paged page-16 grids still below cuDNN (the page order, the H100 plan, one tile
# ahead, two splits), the 1k batch-64 dense grids again, and the sweep, all with the tree's library.
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/new . > $L/pip_new.log 2>&1; el "pip new rc $?"
cd /tmp
SH="16:8:4096:16 4:32:4096:16 16:32:1024:16 64:32:1024:16 64:8:1024:16 16:8:65536:16 4:32:65536:16 64:32:1024 64:8:1024 16:8:4096"
S="$root/bench/decode_splits.py --splits 0 2"
V="--env ord=FLASHATTN_KVC_PAGE_ORDER:1 --env fm0=FLASHATTN_KVC_FAST_MEMORY:0 --env a1=FLASHATTN_KVC_AHEAD:1"
for r in 1 2; do
    PYTHONPATH=/tmp/new timeout 150 python3 $S --shapes $SH $V --json $L/var$r.json > $L/var$r.txt 2>&1; el "var$r rc $?"
done
lim=$(( 560 - ($(date +%s) - t0) ))
PYTHONPATH=/tmp/new timeout $lim python3 $root/bench/bench_decode.py --out $L/sweep > $L/sweep.log 2>&1; el "sweep rc $?"
el done
