#!/usr/bin/env bash
# scratch: the timeline of 16 x 8 x 4k page 16 with one kv head a block (the rule) against four kv heads a block at 4
# splits (merged in clusters of 4), graph-replayed after the memset flush
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DFLASHATTN_TIMELINE=1 -DFLASHATTN_PY_STATIC_CXX_RUNTIME=OFF" FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps -C build-dir=/tmp/build_tl --target /tmp/site_tl . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site_tl
T=$root/bench/kvc_timeline.py
timeout 40 python3 $T --shapes 16,8,4096 4,32,4096 --pages 16 --graph --calls 2 > $L/a_one_head.txt 2>&1; el "a rc $?"
FLASHATTN_KVC_HEAD_GROUP=4 FLASHATTN_KVC_PRINT_PLAN=1 timeout 40 python3 $T --shapes 16,8,4096 4,32,4096 --pages 16 --graph --calls 2 --splits 4 > $L/b_four_heads.txt 2>&1; el "b rc $?"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 40 python3 $T --shapes 16,8,4096 4,32,4096 --pages 16 --graph --calls 2 --splits 4 > $L/c_one_head_4splits.txt 2>&1; el "c rc $?"
el done
