#!/usr/bin/env bash
# scratch: the lean instance (FLASHATTN_KVC_LEAN=1) against the general one, each with the unrolled (0) and the grouped
# (2) cluster merge, after each flush; the kv-cache tests under the lean instance
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
FLASHATTN_KVC_LEAN=1 timeout 150 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py $root/tests/python/test_merge.py -n 14 > $L/pytest_lean.log 2>&1; el "pytest lean rc $? $(tail -1 $L/pytest_lean.log)"
S=$root/bench/decode_splits.py
export FLASHATTN_KVC_MERGE_GROUP=0
M="--env m2=FLASHATTN_KVC_MERGE_GROUP:2 --env l0=FLASHATTN_KVC_LEAN:1 --env l2=FLASHATTN_KVC_LEAN:1,FLASHATTN_KVC_MERGE_GROUP:2"
SH="1:8:1024 1:8:4096 1:8:1024:16 1:8:1024:256 1:8:4096:16 1:32:1024 4:8:1024 4:8:4096 4:8:4096:16 2:8:4096 16:8:4096 16:8:4096:16 4:32:4096:16 16:8:1024"
timeout 100 python3 $S --shapes $SH --splits 0 $M > $L/a_memset.txt 2>&1; el "a rc $?"
FLASHATTN_BENCH_FLUSH=read timeout 100 python3 $S --shapes $SH --splits 0 $M > $L/b_read.txt 2>&1; el "b rc $?"
timeout 100 python3 $S --shapes $SH --splits 0 $M > $L/c_memset.txt 2>&1; el "c rc $?"
timeout 60 python3 $S --seqlen-q 4 --shapes 1:8:4096 4:8:4096 1:32:1024 1:8:1024:16 16:8:4096 --splits 0 $M > $L/d_q4.txt 2>&1; el "d rc $?"
el done
