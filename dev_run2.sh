#!/usr/bin/env bash
# scratch: the last-block merge by flags
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
git log --oneline -1 >> $L/env.txt
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=10 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; echo pip rc $? >> $L/steps.txt ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && cmake --build /tmp/b -j 6 >> $L/cmake.log 2>&1; echo cmake rc $? >> $L/steps.txt ) &
wait; el built
cd /tmp; export PYTHONPATH=/tmp/site
timeout 120 python3 -m pytest -q -rfE -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -k "last_block" -n 8 > $L/pytest_last.log 2>&1; el "pytest last_block rc $? $(tail -1 $L/pytest_last.log)"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 60 python3 -u $root/bench/decode_splits.py --shapes 4:8:65536 4:8:65536:16 1:32:65536:16 1:8:65536 1:8:65536:16 1:8:16384:16 1:8:4096:16 --splits 0 --env last=FLASHATTN_KVC_LAST_MERGE:1 > $L/splits.log 2>&1; el "decode_splits rc $?"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 40 python3 -u $root/bench/decode_splits.py --seqlen-q 4 --shapes 4:8:65536 1:8:65536 1:8:16384:16 --splits 0 --env last=FLASHATTN_KVC_LAST_MERGE:1 > $L/splits4.log 2>&1; el "decode_splits q4 rc $?"
i=0
for v in base last base last; do
  i=$((i+1)); e=""; [ $v = last ] && e="FLASHATTN_KVC_LAST_MERGE=1"
  env $e FLASHATTN_KVC_PRINT_PLAN=1 timeout 70 python3 -u $root/bench/bench_decode.py --out $L/s${i}_$v > $L/s${i}_$v.txt 2>&1; el "sweep $v rc $?"
done
left=$(( 575 - ($(date +%s) - t0) )); el "left $left"
FLASHATTN_KVC_LAST_MERGE=1 timeout $(( left - 50 )) python3 -m pytest -q -rfE -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -n 12 > $L/pytest_kvc_last.log 2>&1; el "pytest kvcache LAST_MERGE=1 rc $? $(tail -1 $L/pytest_kvc_last.log)"
for t in test_kernels test_api; do left=$(( 590 - ($(date +%s) - t0) )); [ $left -gt 8 ] || break; FLASHATTN_KVC_LAST_MERGE=1 timeout $(( left - 4 )) /tmp/b/tests/$t --gtest_filter='GpuKvc*:Kvc*:*KvCache*' > $L/gtest_$t.log 2>&1; el "gtest $t LAST_MERGE=1 rc $? $(tail -1 $L/gtest_$t.log)"; done
el done
