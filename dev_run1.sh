#!/usr/bin/env bash
# scratch: three libraries on one machine: old_src (the last commit's sources), the tree (the translation-warming
# prefetch), deep_src (the last commit's with rings of 4 K + 4 V stages, one block an SM), interleaved rounds; then
# the suites with the tree's library if it wins at 16 x 8 x 4k page 16, else the profiler on it.
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=6 python3 -m pip install --no-build-isolation --no-deps --target /tmp/warm . > $L/pip_warm.log 2>&1; el "pip warm rc $?" ) &
( cd old_src && FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=5 python3 -m pip install --no-build-isolation --no-deps --target /tmp/old . > $L/pip_old.log 2>&1; el "pip old rc $?" ) &
( cd deep_src && FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=5 python3 -m pip install --no-build-isolation --no-deps --target /tmp/deep . > $L/pip_deep.log 2>&1; el "pip deep rc $?" ) &
wait; el built
cd /tmp
SH="16:8:4096:16 4:32:4096:16 64:32:1024:16 16:32:1024:16 64:8:1024:16 16:8:65536:16 4:8:65536:16 1:32:65536:16 16:8:4096:64 16:8:65536:64 16:8:65536:256 1:8:1024:64 1:8:4096:16 4:8:1024:16 16:8:4096"
SQ="16:8:4096:16 4:32:4096:16 16:8:65536:16"
DS="16:8:4096:16 4:32:4096:16 16:8:4096:64 16:8:4096 16:8:65536:16 16:8:65536 4:32:65536:16"
S="$root/bench/decode_splits.py --splits 0"
for r in 1 2 3; do
    for lib in old warm; do
        PYTHONPATH=/tmp/$lib timeout 60 python3 $S --shapes $SH --json $L/${lib}$r.json > $L/${lib}$r.txt 2>&1; el "$lib$r rc $?"
        PYTHONPATH=/tmp/$lib timeout 30 python3 $S --shapes $SQ --page-order sequential --json $L/${lib}_seq$r.json > $L/${lib}_seq$r.txt 2>&1; el "${lib}_seq$r rc $?"
    done
    PYTHONPATH=/tmp/deep timeout 60 python3 $S --shapes $DS --env a2=FLASHATTN_KVC_AHEAD:2 --env a3=FLASHATTN_KVC_AHEAD:3 --json $L/deep$r.json > $L/deep$r.txt 2>&1; el "deep$r rc $?"
done
win=$(python3 - $L <<'PY'
import json, sys
L = sys.argv[1]
def t(f):
    for r in json.load(open(f))["records"]:
        if (r["batch"], r["nheads_k"], r["cache_len"], r.get("page_size")) == (16, 8, 4096, 16):
            return r["us_by_splits"]["0"]
print(int(all(t(f"{L}/warm{r}.json") < t(f"{L}/old{r}.json") - 0.3 for r in (1, 2, 3))))
PY
)
el "warm wins: $win"
if [ "$win" = 1 ]; then
    ( cmake -S $root -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_BUILD_TESTS=ON > $L/cmake.log 2>&1 && cmake --build /tmp/b -j 6 >> $L/cmake.log 2>&1; el "cmake rc $?" ) &
    ( PYTHONPATH=/tmp/warm timeout 200 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python -n 10 --durations=10 > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)" ) &
    wait
    lim=$(( 560 - ($(date +%s) - t0) )); el "ctest with $lim s"
    timeout $lim ctest --test-dir /tmp/b -j 8 --output-on-failure > $L/ctest.log 2>&1; el "ctest rc $? $(grep -a 'tests passed\|tests failed' $L/ctest.log)"
else
    for lib in old warm; do
        PYTHONPATH=/tmp/$lib OUT=$L/ncu_$lib NCU_DECODE_SHAPES="16 8 4096" NCU_DECODE_PAGES=16 NCU_DECODE_CUDNN=0 timeout 120 bash $root/scripts/ncu_decode.sh > $L/ncu_$lib.log 2>&1; el "ncu $lib rc $?"
    done
    PYTHONPATH=/tmp/warm timeout 150 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -n 10 > $L/pytest_kvc.log 2>&1; el "pytest kvc rc $? $(tail -1 $L/pytest_kvc.log)"
fi
el done
