#!/usr/bin/env bash
# scratch: Nsight Compute on the tree's library: the small calls by page size (pages of 256 read 0.4-0.6 us slower
# than pages of 64 at 1 x 8 x 1k), and 16 x 8 x 4k page 16 with pages random and in the pool's order
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
export PYTHONPATH=/tmp/site
OUT=$L/small NCU_DECODE_SHAPES="1 8 1024;1 32 1024" NCU_DECODE_PAGES="16 64 256" timeout 200 bash scripts/ncu_decode.sh > $L/small.log 2>&1; el "small rc $?"
OUT=$L/rand NCU_DECODE_SHAPES="16 8 4096" NCU_DECODE_PAGES="16" NCU_DECODE_CUDNN=0 timeout 60 bash scripts/ncu_decode.sh > $L/rand.log 2>&1; el "rand rc $?"
OUT=$L/seq NCU_DECODE_PAGE_ORDER=sequential NCU_DECODE_SHAPES="16 8 4096" NCU_DECODE_PAGES="16" NCU_DECODE_CUDNN=0 timeout 60 bash scripts/ncu_decode.sh > $L/seq.log 2>&1; el "seq rc $?"
el done
