#!/usr/bin/env bash
# scratch: dense caches' K and V halves folded (the tree) against the library before (old_src), interleaved on one
# machine; what makes paged calls with the pool in order faster than dense (the old library's fold and producer
# switches); the kv-cache tests with the tree's library.
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
D=" 1:8:1024 1:8:4096 1:8:16384 1:8:65536 1:32:1024 1:32:4096 1:32:16384 1:32:65536 4:8:1024 4:8:4096 4:8:16384 4:8:65536 4:32:1024 4:32:4096 4:32:16384 4:32:65536 16:8:1024 16:8:4096 16:8:16384 16:8:65536 16:32:1024 16:32:4096 16:32:16384 16:32:65536 64:8:1024 64:8:4096 64:8:16384 64:8:65536 64:32:1024 64:32:4096 64:32:16384"
SH="16:8:4096:16 4:32:4096:16 64:32:1024:16 16:32:1024:16 64:8:1024:16 16:8:65536:16 4:8:65536:16 1:32:65536:16 16:8:4096:64 16:8:65536:64 16:8:65536:256 1:8:1024:64 1:8:4096:16 4:8:1024:16"
SQ="16:8:4096:16 16:8:4096:64 4:32:4096:16 16:8:65536:64 16:8:65536:256 4:32:65536:256 16:8:4096 16:8:65536 4:32:4096 4:32:65536"
Q4="1:8:4096 4:8:16384 16:8:4096 64:8:1024 4:32:4096 16:32:1024 16:8:65536 64:8:4096"
NF="--env nf=FLASHATTN_KVC_K_FOLD:0,FLASHATTN_KVC_V_FOLD:0"
S="$root/bench/decode_splits.py --splits 0"
for r in 1 2; do
    PYTHONPATH=/tmp/old timeout 150 python3 $S --shapes $D --json $L/dense_old$r.json > $L/dense_old$r.txt 2>&1; el "dense_old$r rc $?"
    PYTHONPATH=/tmp/new timeout 200 python3 $S --shapes $D $NF --json $L/dense_new$r.json > $L/dense_new$r.txt 2>&1; el "dense_new$r rc $?"
    PYTHONPATH=/tmp/old timeout 60 python3 $S --shapes $SH --json $L/paged_old$r.json > $L/paged_old$r.txt 2>&1; el "paged_old$r rc $?"
    PYTHONPATH=/tmp/new timeout 60 python3 $S --shapes $SH --json $L/paged_new$r.json > $L/paged_new$r.txt 2>&1; el "paged_new$r rc $?"
    PYTHONPATH=/tmp/old timeout 90 python3 $S --shapes $SQ --page-order sequential --env kf0=FLASHATTN_KVC_K_FOLD:0 --env vf0=FLASHATTN_KVC_V_FOLD:0 $NF --env op1=FLASHATTN_KVC_ONE_PRODUCER:1 --json $L/seq_old$r.json > $L/seq_old$r.txt 2>&1; el "seq_old$r rc $?"
    PYTHONPATH=/tmp/old timeout 40 python3 $S --shapes $Q4 --seqlen-q 4 --json $L/q4_old$r.json > $L/q4_old$r.txt 2>&1; el "q4_old$r rc $?"
    PYTHONPATH=/tmp/new timeout 60 python3 $S --shapes $Q4 --seqlen-q 4 $NF --json $L/q4_new$r.json > $L/q4_new$r.txt 2>&1; el "q4_new$r rc $?"
done
PYTHONPATH=/tmp/new FLASHATTN_KVC_PRINT_PLAN=1 timeout 30 python3 $S --shapes 16:8:4096 16:8:65536 16:8:4096:16 16:8:65536:256 > $L/plans.txt 2>&1; el "plans rc $?"
lim=$(( 560 - ($(date +%s) - t0) )); [ $lim -gt 150 ] && lim=150
PYTHONPATH=/tmp/new timeout $lim python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -n 10 > $L/pytest_kvc.log 2>&1; el "pytest kvc rc $? $(tail -1 $L/pytest_kvc.log)"
el done
