#!/usr/bin/env bash
# scratch: balanced splits with a fixed share first (FLASHATTN_KVC_BALANCE_FIXED): tests, then the eight-split grids
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
timeout 120 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -k "balanced" -n 8 > $L/pytest_balanced.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest_balanced.log)"
S=$root/bench/decode_splits.py
B=FLASHATTN_KVC_BALANCE:2
F=FLASHATTN_KVC_BALANCE_FIXED
V="--env b2=$B --env f50=$B,$F:50 --env f75=$B,$F:75 --env f90=$B,$F:90 --env f75c4=FLASHATTN_KVC_BALANCE:4,$F:75"
timeout 150 python3 $S --shapes 4:8:65536:16 1:32:65536:16 4:8:65536 4:8:65536:64 1:32:65536:64 4:8:65536:256 --splits 0 $V --env off=FLASHATTN_KVC_BALANCE:0 > $L/a_fixed_q1.txt 2>&1; el "a rc $?"
timeout 100 python3 $S --seqlen-q 4 --shapes 4:8:65536:16 1:32:65536:16 4:8:65536 --splits 0 $V --env off=FLASHATTN_KVC_BALANCE:0 > $L/b_fixed_q4.txt 2>&1; el "b rc $?"
timeout 80 python3 $S --shapes 16:8:4096 16:8:4096:16 4:32:4096:16 --splits 0 1 2 4 > $L/c_4k_splits.txt 2>&1; el "c rc $?"
el done
