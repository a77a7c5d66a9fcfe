#!/usr/bin/env bash
# scratch: the flat pool maps (flat_src: fa2a93c's library, untracked) with the folded copies off, against this tree's
# library (0d7853e's kernel) with and without its folds, on one machine; pages random and in the pool's order
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/cur . > $L/pip_cur.log 2>&1; el "pip cur rc $?" ) &
( cd flat_src && FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/flat . > $L/pip_flat.log 2>&1; el "pip flat rc $?" ) &
wait; el built
cd /tmp
SH="16:8:4096:16 4:32:4096:16 64:32:1024:16 16:8:4096:64 16:8:65536:16 16:8:65536:64 16:8:65536:256 1:8:1024:64 16:8:4096 16:8:65536"
NF=FLASHATTN_KVC_K_FOLD:0,FLASHATTN_KVC_V_FOLD:0
S="$root/bench/decode_splits.py --splits 0"
for r in 1 2; do for o in random sequential; do
    [ $r = 2 ] && [ $o = sequential ] && continue
    PYTHONPATH=/tmp/cur timeout 60 python3 $S --page-order $o --env nofold=$NF --shapes $SH --json $L/cur_${o}$r.json > $L/cur_${o}$r.txt 2>&1; el "cur $o $r rc $?"
    PYTHONPATH=/tmp/flat timeout 80 python3 $S --page-order $o --env flat=FLASHATTN_KVC_FLAT_POOL:1 --env nofold=$NF \
        --env flatnofold=FLASHATTN_KVC_FLAT_POOL:1,$NF --shapes $SH --json $L/flat_${o}$r.json > $L/flat_${o}$r.txt 2>&1; el "flat $o $r rc $?"
done; done
el done
