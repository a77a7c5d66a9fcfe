root=$PWD; t0=$(date +%s)
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site $root > $OUT/pip.log 2>&1 || { echo pip failed; tail -30 $OUT/pip.log; exit 1; }
echo "install $(( $(date +%s)-t0 )) s"
cd /tmp
PYTHONPATH=/tmp/site timeout 240 python3 -m pytest $root/tests/python/test_kvcache.py -q -x -p no:cacheprovider --rootdir $root -k "shared_tiles or dense_grouped or several_kv" > $OUT/pytest_shared.txt 2>&1; echo "shared tests rc $? $(( $(date +%s)-t0 )) s"; tail -3 $OUT/pytest_shared.txt
PYTHONPATH=/tmp/site timeout 240 python3 -m pytest $root/tests/python/test_kvcache.py -q -p no:cacheprovider --rootdir $root > $OUT/pytest_kvc.txt 2>&1; echo "kvc tests rc $? $(( $(date +%s)-t0 )) s"; tail -3 $OUT/pytest_kvc.txt
S="64:8:1024 64:8:1024:64 16:8:4096 16:8:4096:64 64:32:1024 64:32:1024:64 64:8:4096:64 64:8:16384 64:32:4096 32:32:4096 16:32:1024 4:32:4096 16:8:16384 64:8:1024:256"
for r in 1 2; do for e in 0 1 1c8; do
  FLASHATTN_KVC_STEAL_CHUNK=$([ $e = 1c8 ] && echo 8 || echo 4) FLASHATTN_KVC_SHARE_TILES=${e:0:1} PYTHONPATH=/tmp/site timeout 150 python3 $root/bench/decode_splits.py --shapes $S --splits 0 --json $OUT/ab_e${e}_r$r.json > $OUT/ab_e${e}_r$r.txt 2>&1
  echo "ab e$e r$r rc $? $(( $(date +%s)-t0 )) s"
done; done
cd $OUT && tar czf ab.tgz ab_* && rm ab_*; paste <(cut -c1-60 /dev/null) /dev/null; for f in pytest_shared.txt; do grep -E "passed|failed|Error" $f | tail -5; done
