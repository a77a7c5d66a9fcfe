#!/usr/bin/env bash
# scratch: the paged producers without divisions in their loop (the tree) against the library before (old_src,
# untracked: the last commit's), interleaved on one machine; then every suite and the sweep with the tree's
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/new . > $L/pip_new.log 2>&1; el "pip new rc $?" ) &
( cd old_src && FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/old . > $L/pip_old.log 2>&1; el "pip old rc $?" ) &
wait; el built
cd /tmp
SH="16:8:4096:16 4:32:4096:16 64:32:1024:16 64:8:1024:16 16:8:65536:16 4:8:65536:16 1:32:65536:16 16:8:4096:64 16:8:65536:64 16:8:65536:256 4:32:65536:256 1:8:1024:64 1:8:4096:16 4:8:1024:16 16:8:4096"
S="$root/bench/decode_splits.py --splits 0"
for r in 1 2; do
    PYTHONPATH=/tmp/old timeout 60 python3 $S --shapes $SH --json $L/old$r.json > $L/old$r.txt 2>&1; el "old$r rc $?"
    PYTHONPATH=/tmp/new timeout 60 python3 $S --shapes $SH --json $L/new$r.json > $L/new$r.txt 2>&1; el "new$r rc $?"
done
( cmake -S $root -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && cmake --build /tmp/b -j 6 >> $L/cmake.log 2>&1; el "cmake rc $?" ) &
( PYTHONPATH=/tmp/new timeout 200 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python -n 10 --durations=10 > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)" ) &
wait
lim=$(( 540 - ($(date +%s) - t0) )); el "ctest with $lim s"
timeout $lim ctest --test-dir /tmp/b -j 8 --output-on-failure > $L/ctest.log 2>&1; el "ctest rc $? $(grep -a 'tests passed\|tests failed' $L/ctest.log)"
lim=$(( 590 - ($(date +%s) - t0) ))
PYTHONPATH=/tmp/new timeout $lim python3 $root/bench/bench_decode.py --out $L/sweep > $L/sweep.log 2>&1; el "sweep rc $?"
el done
