#!/usr/bin/env bash
# scratch: every suite with balanced splits by rule; the sweep; the rule against FLASHATTN_KVC_BALANCE=0
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=10 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; echo pip rc $? >> $L/steps.txt ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && cmake --build /tmp/b -j 6 >> $L/cmake.log 2>&1; echo cmake rc $? >> $L/steps.txt ) &
wait; el built
cd /tmp; export PYTHONPATH=/tmp/site
lim=$(( 300 - ($(date +%s) - t0) ))
( timeout $lim ctest --test-dir /tmp/b -j 6 --output-on-failure > $L/ctest.log 2>&1; el "ctest rc $? $(grep -a 'tests passed\|tests failed' $L/ctest.log)" ) &
( timeout $lim python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python -n 10 --durations=15 > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)" ) &
wait
timeout 90 python3 $root/bench/bench_decode.py --out $L/sweep > $L/sweep.log 2>&1; el "sweep rc $?"
S=$root/bench/decode_splits.py
FLASHATTN_KVC_PRINT_PLAN=1 timeout 60 python3 $S --shapes 4:8:65536:16 1:32:65536:16 4:8:65536 16:8:16384:16 --splits 0 --env off=FLASHATTN_KVC_BALANCE:0 > $L/rule_q1.txt 2> $L/rule_q1_plans.txt; el "rule q1 rc $?"
FLASHATTN_KVC_PRINT_PLAN=1 timeout 60 python3 $S --seqlen-q 4 --shapes 4:8:65536:16 1:32:65536:16 --splits 0 --env off=FLASHATTN_KVC_BALANCE:0 > $L/rule_q4.txt 2> $L/rule_q4_plans.txt; el "rule q4 rc $?"
el done
