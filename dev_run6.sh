#!/usr/bin/env bash
# scratch: the Python suite with the placement rule of pairs (every paged call in clusters of two by default).
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/new . > $L/pip_new.log 2>&1; el "pip new rc $?"
cd /tmp
lim=$(( 225 - ($(date +%s) - t0) ))
PYTHONPATH=/tmp/new timeout $lim python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python -n 12 --durations=5 > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)"
el done
