#!/usr/bin/env bash
# scratch: the kv-cache timeline with progress marks: does the grid read as fast at its end as in its middle?
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DFLASHATTN_TIMELINE=1 -DFLASHATTN_PY_STATIC_CXX_RUNTIME=OFF" FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps -C build-dir=/tmp/build_tl --target /tmp/site_tl . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site_tl
T=$root/bench/kvc_timeline.py
timeout 150 python3 $T --graph --calls 2 --shapes 4,8,65536 1,32,65536 16,8,65536 4,32,65536 --pages 0 16 64 > $L/tl_64k.txt 2>&1; el "64k rc $?"
timeout 100 python3 $T --graph --calls 2 --shapes 16,8,16384 64,8,16384 16,8,4096 --pages 0 16 > $L/tl_16k.txt 2>&1; el "16k rc $?"
timeout 60 python3 $T --graph --calls 2 --splits 4 --shapes 4,8,65536 --pages 0 16 > $L/tl_4splits.txt 2>&1; el "4 splits rc $?"
el done
