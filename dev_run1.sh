#!/usr/bin/env bash
# scratch: blocks in kv-head-major order (FLASHATTN_KVC_HEADS_MAJOR=1): its test, then the 4k grids and others
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv > $L/gpu.txt 2>&1
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
timeout 90 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -k "heads_major_order" -n 6 > $L/pytest_hm.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest_hm.log)"
S=$root/bench/decode_splits.py
M="--env hm=FLASHATTN_KVC_HEADS_MAJOR:1"
SH="16:8:4096 16:8:4096:16 16:8:4096:64 16:8:4096:256 4:32:4096 4:32:4096:16 64:8:4096 64:8:4096:16 16:32:4096 64:32:1024 16:8:1024"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 150 python3 $S --shapes $SH --splits 0 $M > $L/a_4k.txt 2> $L/a_plans.txt; el "a rc $?"
timeout 150 python3 $S --shapes 16:8:16384 16:8:16384:16 16:8:65536 16:8:65536:16 4:32:65536 4:32:65536:16 64:8:16384 --splits 0 $M > $L/b_long.txt 2>&1; el "b rc $?"
timeout 100 python3 $S --shapes 16:8:4096 16:8:4096:16 4:32:4096:16 16:8:4096:64 --splits 0 $M > $L/c_4k_again.txt 2>&1; el "c rc $?"
timeout 60 python3 $S --seqlen-q 4 --shapes 16:8:4096 16:8:4096:16 64:8:4096 --splits 0 $M > $L/d_q4.txt 2>&1; el "d rc $?"
el done
