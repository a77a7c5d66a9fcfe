#!/usr/bin/env bash
# scratch: FLASHATTN_KVC_FLAT_POOL=1 (KvcPlan::flat_pool): its tests, then an A/B against the paged maps on the
# sweep's page-16 and page-64 grids (random pages, folds on), page 16 with the pool in order, four query rows on a few;
# then every suite
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
( timeout 60 ctest --test-dir /tmp/b -R PageOrder --output-on-failure > $L/ctest_flat.log 2>&1; el "ctest flat rc $? $(grep -a 'tests passed\|tests failed' $L/ctest_flat.log)" ) &
( timeout 60 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -k flat_pool > $L/pytest_flat.log 2>&1; el "pytest flat rc $? $(tail -1 $L/pytest_flat.log)" ) &
wait
S="$root/bench/decode_splits.py --splits 0 --env flat=FLASHATTN_KVC_FLAT_POOL:1"
shapes() { for b in 1 4 16 64; do for h in 8 32; do for c in 1024 4096 16384 65536; do
    [ $b$h$c = 643265536 ] || echo $b:$h:$c:$1; done; done; done; }
timeout 130 python3 $S --shapes $(shapes 16) --json $L/r16.json > $L/r16.txt 2>&1; el "r16 rc $?"
timeout 130 python3 $S --shapes $(shapes 64) --json $L/r64.json > $L/r64.txt 2>&1; el "r64 rc $?"
timeout 130 python3 $S --page-order sequential --shapes $(shapes 16) --json $L/s16.json > $L/s16.txt 2>&1; el "s16 rc $?"
timeout 40 python3 $S --seqlen-q 4 --shapes 16:8:4096:16 64:32:1024:16 16:8:65536:16 4:32:65536:64 64:8:4096:64 --json $L/q4.json > $L/q4.txt 2>&1; el "q4 rc $?"
lim=$(( 560 - ($(date +%s) - t0) )); el "suites with $lim s"
( timeout $lim ctest --test-dir /tmp/b -j 6 --output-on-failure > $L/ctest.log 2>&1; el "ctest rc $? $(grep -a 'tests passed\|tests failed' $L/ctest.log)" ) &
( timeout $lim python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python -n 10 --durations=10 > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)" ) &
wait
el done
