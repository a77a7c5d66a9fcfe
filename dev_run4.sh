#!/usr/bin/env bash
# scratch: pages in the pool's order (the dense cache's addresses): the paged producers with and without their table
# load a tile (FLASHATTN_KVC_DIAG_CONSECUTIVE_PAGES=1), with the paged plan and with the dense one's ring and producer
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
B="$root/bench/bench_decode.py --page-order sequential --seqlens-q 1"
run() {  # label, then env assignments
    local label=$1; shift
    env "$@" timeout 60 python3 $B --nheads-k 8 --batches 16 --cache-lens 4096 65536 --pages 0 16 64 256 --out $L/${label}_a > $L/${label}_a.log 2>&1; el "$label a rc $?"
    env "$@" timeout 40 python3 $B --nheads-k 32 --batches 4 --cache-lens 65536 --pages 0 16 256 --out $L/${label}_b > $L/${label}_b.log 2>&1; el "$label b rc $?"
    env "$@" timeout 40 python3 $B --nheads-k 32 --batches 64 --cache-lens 1024 --pages 0 16 256 --out $L/${label}_c > $L/${label}_c.log 2>&1; el "$label c rc $?"
}
DL="FLASHATTN_KVC_AHEAD=1 FLASHATTN_KVC_ONE_PRODUCER=1 FLASHATTN_KVC_K_FOLD=0 FLASHATTN_KVC_V_FOLD=0"
run base1 X=1
run diag1 FLASHATTN_KVC_DIAG_CONSECUTIVE_PAGES=1
run base2 X=1
run diag2 FLASHATTN_KVC_DIAG_CONSECUTIVE_PAGES=1
run dl $DL
run dldiag $DL FLASHATTN_KVC_DIAG_CONSECUTIVE_PAGES=1
el done
