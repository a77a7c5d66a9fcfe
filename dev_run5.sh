#!/usr/bin/env bash
# scratch: placement clusters of two on paged caches (the rule now) against none (FLASHATTN_KVC_PLACE=1), three
# interleaved rounds in one library, pages random and in order; then the sweep with the rule.
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/new . > $L/pip_new.log 2>&1; el "pip new rc $?"
cd /tmp
SH="16:8:4096:16 4:32:4096:16 64:32:1024:16 16:32:1024:16 64:8:1024:16 16:8:65536:16 4:8:65536:16 1:32:65536:16 16:8:4096:64 16:8:65536:64 16:8:65536:256 4:32:65536:256 1:8:1024:64 1:8:4096:16 4:8:1024:16 4:8:16384:16 1:32:16384:16 64:32:4096:16 64:8:16384:16 64:8:4096:256"
S="$root/bench/decode_splits.py --splits 0"
for r in 1 2 3; do
    PYTHONPATH=/tmp/new timeout 90 python3 $S --shapes $SH --env p1=FLASHATTN_KVC_PLACE:1 --json $L/paged$r.json > $L/paged$r.txt 2>&1; el "paged$r rc $?"
done
PYTHONPATH=/tmp/new timeout 40 python3 $S --shapes 16:8:4096:16 4:8:65536:16 1:32:65536:16 64:32:4096:16 --page-order sequential --env p1=FLASHATTN_KVC_PLACE:1 --json $L/seq.json > $L/seq.txt 2>&1; el "seq rc $?"
lim=$(( 330 - ($(date +%s) - t0) ))
PYTHONPATH=/tmp/new timeout $lim python3 $root/bench/bench_decode.py --out $L/sweep > $L/sweep.log 2>&1; el "sweep rc $?"
el done
