#!/usr/bin/env bash
# scratch: the balanced tests after the rule's one-wave limit and the new cases; 64 x 8 x 64k page 16 balanced
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 110 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
timeout 50 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -k "balanced or last_block" -n 12 > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 30 python3 $root/bench/decode_splits.py --shapes 64:8:65536:16 4:8:65536:16 --splits 0 --env bal2=FLASHATTN_KVC_BALANCE:2 --env off=FLASHATTN_KVC_BALANCE:0 > $L/splits.txt 2> $L/plans.txt; el "splits rc $?"
el done
