#!/usr/bin/env bash
# scratch: the first tens of microseconds of a call after the memset flush against the reading one (timelines), and
# both flushes' graph timings beside cuDNN's
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; echo pip rc $? >> $L/steps.txt ) &
( CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DFLASHATTN_TIMELINE=1 -DFLASHATTN_PY_STATIC_CXX_RUNTIME=OFF" FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps -C build-dir=/tmp/build_tl --target /tmp/site_tl . > $L/pip_tl.log 2>&1; echo pip_tl rc $? >> $L/steps.txt ) &
wait; el built
cd /tmp
T=$root/bench/kvc_timeline.py
for fl in zero read; do
  FLASHATTN_BENCH_FLUSH=$fl PYTHONPATH=/tmp/site_tl timeout 60 python3 $T --graph --calls 2 --shapes 16,8,4096 4,8,65536 1,8,4096 --pages 0 16 > $L/tl_$fl.txt 2>&1; el "timeline $fl rc $?"
  FLASHATTN_BENCH_FLUSH=$fl PYTHONPATH=/tmp/site timeout 120 python3 $root/bench/decode_splits.py --shapes 16:8:4096 16:8:4096:16 4:32:4096:16 4:8:65536 4:8:65536:16 1:32:65536:16 1:8:1024 1:8:4096 64:8:1024 64:32:4096 --splits 0 --json $L/splits_$fl.json > $L/splits_$fl.txt 2>&1; el "decode_splits $fl rc $?"
done
el done
