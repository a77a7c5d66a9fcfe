#!/usr/bin/env bash
# scratch: where the paged grids' GPC imbalance comes from (page order, tiles ahead), timelines and graph timings
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
for v in default PAGE_ORDER=0 AHEAD=1; do
  envs=(); [ $v != default ] && envs=(FLASHATTN_KVC_$v)
  env "${envs[@]}" PYTHONPATH=/tmp/site_tl FLASHATTN_KVC_PRINT_PLAN=1 timeout 60 python3 $T --graph --calls 1 --shapes 4,8,65536 16,8,16384 16,8,65536 --pages 16 64 > $L/tl_$v.txt 2>&1; el "timeline $v rc $?"
done
PYTHONPATH=/tmp/site timeout 200 python3 $root/bench/decode_splits.py --shapes 4:8:65536 4:8:65536:16 4:8:65536:64 1:32:65536:16 16:8:16384:16 16:8:65536:16 16:8:65536:64 64:8:16384:16 16:8:4096:16 --splits 0 --env order0=FLASHATTN_KVC_PAGE_ORDER:0 --env ahead1=FLASHATTN_KVC_AHEAD:1 --json $L/splits.json > $L/splits.txt 2>&1; el "decode_splits rc $?"
el done
