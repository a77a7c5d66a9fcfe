#!/usr/bin/env bash
# scratch: the timeline of 16 x 8 x 4k page 16, one kv head a block against four at 4 splits, each with and without
# the products (bench/patches/kvc_sm90_no_products.patch, FLASHATTN_KVC_NO_MATH=1)
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
grep -c "FLASHATTN_KVC_NO_MATH" src/kernels/dispatch.cpp > $L/patch.log 2>&1; el "patched: $(cat $L/patch.log)"
CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DFLASHATTN_TIMELINE=1 -DFLASHATTN_PY_STATIC_CXX_RUNTIME=OFF" FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps -C build-dir=/tmp/build_tl --target /tmp/site_tl . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site_tl
T=$root/bench/kvc_timeline.py
A="--shapes 16,8,4096 4,32,4096 --pages 16 --graph --calls 1"
FLASHATTN_KVC_NO_MATH=1 timeout 25 python3 $T $A > $L/a_one_head_nomath.txt 2>&1; el "a rc $?"
FLASHATTN_KVC_NO_MATH=1 FLASHATTN_KVC_HEAD_GROUP=4 timeout 25 python3 $T $A --splits 4 > $L/b_four_heads_nomath.txt 2>&1; el "b rc $?"
FLASHATTN_KVC_HEAD_GROUP=4 timeout 25 python3 $T $A --splits 4 > $L/c_four_heads.txt 2>&1; el "c rc $?"
timeout 25 python3 $T $A > $L/d_one_head.txt 2>&1; el "d rc $?"
el done
