root=$PWD; t0=$(date +%s)
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site $root > $OUT/pip.log 2>&1 || { tail -30 $OUT/pip.log; exit 1; }
echo "install $(( $(date +%s)-t0 )) s"; cd /tmp
PYTHONPATH=/tmp/site timeout 200 python3 -m pytest $root/tests/python/test_kvcache.py -q -p no:cacheprovider --rootdir $root > $OUT/pytest_kvc.txt 2>&1; echo "kvc rc $? $(( $(date +%s)-t0 )) s"; tail -1 $OUT/pytest_kvc.txt
FLASHATTN_KVCACHE_PATH=sm80 PYTHONPATH=/tmp/site timeout 200 python3 -m pytest $root/tests/python/test_kvcache.py -q -p no:cacheprovider --rootdir $root > $OUT/pytest_kvc_sm80.txt 2>&1; echo "kvc sm80 rc $? $(( $(date +%s)-t0 )) s"; tail -1 $OUT/pytest_kvc_sm80.txt
PYTHONPATH=/tmp/site timeout 150 python3 $root/bench/bench_decode.py --out $OUT/full > $OUT/decode.log 2>&1; echo "decode rc $? $(( $(date +%s)-t0 )) s"
