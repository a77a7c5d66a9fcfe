#!/usr/bin/env bash
# scratch: placement clusters (a sequence's kv heads' blocks launched as a cluster: FLASHATTN_KVC_PLACE), the rule's
# 8 on paged caches against none (1), 2 and 4, one library; then every suite and the sweep with the rule.
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/new . > $L/pip_new.log 2>&1; el "pip new rc $?"
( cmake -S $root -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && nice -n 19 cmake --build /tmp/b -j 5 >> $L/cmake.log 2>&1; el "cmake rc $?" ) &
cd /tmp
SH="16:8:4096:16 4:32:4096:16 64:32:1024:16 16:32:1024:16 64:8:1024:16 16:8:65536:16 4:8:65536:16 1:32:65536:16 16:8:4096:64 16:8:65536:64 16:8:65536:256 1:8:1024:64 1:8:4096:16 4:8:1024:16 64:32:4096:16 64:8:16384:16 16:32:16384:64 64:8:4096:256"
DN="16:8:4096 16:8:65536 4:32:65536 64:32:1024 64:8:16384"
S="$root/bench/decode_splits.py --splits 0"
V="--env p1=FLASHATTN_KVC_PLACE:1 --env p2=FLASHATTN_KVC_PLACE:2 --env p4=FLASHATTN_KVC_PLACE:4"
for r in 1 2; do
    PYTHONPATH=/tmp/new timeout 150 python3 $S --shapes $SH $V --json $L/paged$r.json > $L/paged$r.txt 2>&1; el "paged$r rc $?"
    PYTHONPATH=/tmp/new timeout 60 python3 $S --shapes $DN $V --env p8=FLASHATTN_KVC_PLACE:8 --json $L/dense$r.json > $L/dense$r.txt 2>&1; el "dense$r rc $?"
done
PYTHONPATH=/tmp/new timeout 60 python3 $S --shapes 16:8:4096:16 4:32:4096:16 16:8:65536:16 --page-order sequential --env p1=FLASHATTN_KVC_PLACE:1 --json $L/seq.json > $L/seq.txt 2>&1; el "seq rc $?"
PYTHONPATH=/tmp/new timeout 200 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python -n 10 --durations=10 > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)"
wait
lim=$(( 520 - ($(date +%s) - t0) )); el "ctest with $lim s"
timeout $lim ctest --test-dir /tmp/b -j 8 --output-on-failure > $L/ctest.log 2>&1; el "ctest rc $? $(grep -a 'tests passed\|tests failed' $L/ctest.log)"
lim=$(( 585 - ($(date +%s) - t0) ))
[ $lim -gt 45 ] && { PYTHONPATH=/tmp/new timeout $lim python3 $root/bench/bench_decode.py --out $L/sweep > $L/sweep.log 2>&1; el "sweep rc $?"; }
el done
