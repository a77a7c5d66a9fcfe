#!/usr/bin/env bash
# scratch: the last-block merge tests after the epoch change; the kv-cache suites at the default plan
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
git log --oneline -1 >> $L/env.txt
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=10 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; echo pip rc $? >> $L/steps.txt ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && cmake --build /tmp/b -j 6 >> $L/cmake.log 2>&1; echo cmake rc $? >> $L/steps.txt ) &
wait; el built
cd /tmp; export PYTHONPATH=/tmp/site
timeout 100 python3 -m pytest -q -rfE -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -k "last_block" -n 8 > $L/pytest_last.log 2>&1; el "pytest last_block rc $? $(tail -1 $L/pytest_last.log)"
for t in test_kernels test_api; do timeout 60 /tmp/b/tests/$t --gtest_filter='GpuKvc*:Kvc*:*KvCache*' > $L/gtest_$t.log 2>&1; el "gtest $t rc $? $(tail -1 $L/gtest_$t.log)"; done
left=$(( 455 - ($(date +%s) - t0) )); el "left $left"
timeout $left python3 -m pytest -q -rfE -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -n 14 --durations=15 > $L/pytest_kvc.log 2>&1; el "pytest kvcache rc $? $(tail -1 $L/pytest_kvc.log)"
el done
