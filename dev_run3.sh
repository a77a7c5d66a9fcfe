#!/usr/bin/env bash
# scratch: kv-head groups on the 128-unit 4k grids: decode_splits and the timeline by group
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?" ) &
( CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DFLASHATTN_TIMELINE=1 -DFLASHATTN_PY_STATIC_CXX_RUNTIME=OFF" FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps -C build-dir=/tmp/build_tl --target /tmp/site_tl . > $L/pip_tl.log 2>&1; el "pip tl rc $?" ) &
wait
cd /tmp
S=$root/bench/decode_splits.py
G="--env g2=FLASHATTN_KVC_HEAD_GROUP:2 --env g4=FLASHATTN_KVC_HEAD_GROUP:4 --env g8=FLASHATTN_KVC_HEAD_GROUP:8"
PYTHONPATH=/tmp/site FLASHATTN_KVC_PRINT_PLAN=1 timeout 120 python3 $S --shapes 16:8:4096:16 4:32:4096:16 16:8:4096 16:8:4096:64 --splits 0 $G > $L/a_groups.txt 2> $L/a_plans.txt; el "a rc $?"
T=$root/bench/kvc_timeline.py
for g in 1 2 4; do
  PYTHONPATH=/tmp/site_tl FLASHATTN_KVC_HEAD_GROUP=$g FLASHATTN_KVC_PRINT_PLAN=1 timeout 60 python3 $T --graph --calls 2 --shapes 16,8,4096 --pages 16 > $L/tl_g$g.txt 2>&1; el "tl g$g rc $?"
done
PYTHONPATH=/tmp/site_tl timeout 60 python3 $T --graph --calls 2 --shapes 16,8,4096 --pages 0 > $L/tl_dense.txt 2>&1; el "tl dense rc $?"
el done
