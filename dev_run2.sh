#!/usr/bin/env bash
# scratch: the cluster merge run dry at the block's start (FLASHATTN_KVC_WARM_MERGE=1): its tests, then small calls after each flush
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
timeout 120 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -k "run_dry_first or two_splits_at_a_time or merged_in_a_cluster or one_sequence_many_splits" -n 8 > $L/pytest_merge.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest_merge.log)"
S=$root/bench/decode_splits.py
M="--env wm=FLASHATTN_KVC_WARM_MERGE:1 --env m2=FLASHATTN_KVC_MERGE_GROUP:2"
SH="1:8:1024 1:8:4096 1:8:1024:16 1:8:4096:16 1:32:1024 1:32:4096 4:8:1024 4:8:4096 4:8:4096:16 1:32:4096:64 2:8:4096 1:8:16384"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 120 python3 $S --shapes $SH --splits 0 $M > $L/a_memset.txt 2> $L/a_plans.txt; el "a rc $?"
FLASHATTN_BENCH_FLUSH=read timeout 150 python3 $S --shapes $SH --splits 0 --warm-code $M > $L/b_read.txt 2>&1; el "b rc $?"
timeout 120 python3 $S --shapes $SH --splits 0 $M > $L/c_memset.txt 2>&1; el "c rc $?"
FLASHATTN_BENCH_FLUSH=read timeout 120 python3 $S --shapes $SH --splits 0 $M > $L/d_read.txt 2>&1; el "d rc $?"
timeout 100 python3 $S --seqlen-q 4 --shapes 1:8:4096 4:8:4096 1:32:1024 1:8:1024:16 --splits 0 $M > $L/e_q4.txt 2>&1; el "e rc $?"
el done
