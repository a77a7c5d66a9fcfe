#!/usr/bin/env bash
# scratch: pages in the pool's order read through maps of the dense cache's shape (FLASHATTN_KVC_DIAG_DENSE_MAP=1)
# against the paged maps, folds off both ways: is the map's shape what the paged path costs at 64k?
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site FLASHATTN_KVC_K_FOLD=0 FLASHATTN_KVC_V_FOLD=0
B="$root/bench/bench_decode.py --page-order sequential --seqlens-q 1 --nheads-k 8 --batches 16 --cache-lens 65536 4096 --pages 0 16 256"
for r in 1 2; do
    timeout 30 python3 $B --out $L/paged$r > $L/paged$r.log 2>&1; el "paged$r rc $?"
    FLASHATTN_KVC_DIAG_DENSE_MAP=1 timeout 30 python3 $B --out $L/dmap$r > $L/dmap$r.log 2>&1; el "dmap$r rc $?"
done
el done
