#!/usr/bin/env bash
# scratch: balanced splits (FLASHATTN_KVC_BALANCE) tested and timed; the default path against eb55edc's (base_src.tar)
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site_new . > $L/pip.log 2>&1; echo pip rc $? >> $L/steps.txt ) &
( mkdir -p /tmp/base && tar -xf base_src.tar -C /tmp/base && cd /tmp/base && FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site_base . > $L/pip_base.log 2>&1; echo pip_base rc $? >> $L/steps.txt ) &
wait; el built
cd /tmp
PYTHONPATH=/tmp/site_new timeout 200 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -n 12 --durations=10 > $L/pytest_kvc.log 2>&1; el "pytest kvcache rc $? $(tail -1 $L/pytest_kvc.log)"
S=$root/bench/decode_splits.py
for r in 1 2; do for v in base new; do
  PYTHONPATH=/tmp/site_$v timeout 60 python3 $S --shapes 1:8:1024 1:8:1024:16 1:8:4096 4:8:1024:16 16:8:4096 16:8:4096:16 4:32:4096:16 64:8:1024 4:8:65536 4:8:65536:16 --splits 0 > $L/ab_${v}_$r.txt 2>&1; el "ab $v $r rc $?"
done; done
PYTHONPATH=/tmp/site_new FLASHATTN_KVC_PRINT_PLAN=1 timeout 150 python3 $S --shapes 4:8:65536:16 4:8:65536:64 1:32:65536:16 16:8:16384:16 16:8:65536:16 16:8:65536:64 64:8:16384:16 4:8:65536 --splits 0 --env bal1=FLASHATTN_KVC_BALANCE:1 --env bal2=FLASHATTN_KVC_BALANCE:2 --env bal4=FLASHATTN_KVC_BALANCE:4 --json $L/balance.json > $L/balance.txt 2> $L/balance_plans.txt; el "balance rc $?"
el done
