#!/usr/bin/env bash
# scratch: every suite at the final code (fixed split shares by default); balanced splits by rule against fixed shares on
# the grids the rule takes; the sweeps after each flush
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=10 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?" ) &
( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && cmake --build /tmp/b -j 6 >> $L/cmake.log 2>&1; el "cmake rc $?" ) &
wait; el built
cd /tmp; export PYTHONPATH=/tmp/site
S=$root/bench/decode_splits.py
timeout 60 python3 $S --shapes 4:8:65536:16 1:32:65536:16 4:8:65536 --splits 0 --env rule=FLASHATTN_KVC_BALANCE:rule > $L/a_balance.txt 2>&1; el "a rc $?"
timeout 40 python3 $S --seqlen-q 4 --shapes 4:8:65536:16 1:32:65536:16 --splits 0 --env rule=FLASHATTN_KVC_BALANCE:rule > $L/b_balance_q4.txt 2>&1; el "b rc $?"
lim=$(( 330 - ($(date +%s) - t0) ))
( timeout $lim ctest --test-dir /tmp/b -j 6 --output-on-failure > $L/ctest.log 2>&1; el "ctest rc $? $(grep -a 'tests passed\|tests failed' $L/ctest.log)" ) &
( timeout $lim python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python -n 10 --durations=10 > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)" ) &
wait
timeout 60 python3 $root/bench/bench_decode.py --out $L/sweep > $L/sweep.log 2>&1; el "sweep rc $?"
FLASHATTN_BENCH_FLUSH=read timeout 60 python3 $root/bench/bench_decode.py --out $L/sweep_read > $L/sweep_read.log 2>&1; el "sweep read rc $?"
el done
