#!/usr/bin/env bash
# Session 35 run 9: the first copies of two producer warps: V0 after K0 (1), in turn K0 V0 K1 V1 (2), at once (0).
rm -rf /tmp/site; CMAKE_BUILD_PARALLEL_LEVEL=16 FLASHATTN_CUDA_ARCHS=90a python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/site . > $OUT/pip.log 2>&1 || { tail -30 $OUT/pip.log; exit 1; }
PYTHONPATH=/tmp/site python3 bench/decode_splits.py --shapes 1:8:4096 1:8:4096:16 1:8:4096:64 1:8:4096:256 1:32:4096:16 4:32:1024:16 4:8:4096:16 1:8:16384:16 16:8:4096:16 4:32:4096:16 16:8:4096:256 --splits 0 --env atonce=FLASHATTN_KVC_FIRST_ORDER:0 --env turns=FLASHATTN_KVC_FIRST_ORDER:2 --json $OUT/first_order.json > $OUT/first_order.txt 2>&1
tail -12 $OUT/first_order.txt
root=$PWD; (cd /tmp && PYTHONPATH=/tmp/site timeout 200 python3 -m pytest -q -p no:cacheprovider --rootdir $root \
  $root/tests/python/test_kvcache.py $root/tests/python/test_merge.py) > $OUT/tests_kv.log 2>&1
tail -2 $OUT/tests_kv.log
