#!/usr/bin/env bash
# scratch: test_repeated_calls_give_the_same_bits at the final code, and the same cases with the balance rule
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
timeout 60 python3 -m pytest -q -rfEs -p no:cacheprovider --rootdir $root $root/tests/python/test_kvcache.py -k "repeated_calls or balanced_by_rule" > $L/pytest.log 2>&1; el "pytest rc $? $(tail -1 $L/pytest.log)"
cat > /tmp/rule.py <<PY
import os, sys
sys.path.insert(0, "$root/tests/python")
os.environ["FLASHATTN_KVC_BALANCE"] = "rule"
import test_kvcache as t
class KeepEnv:
    def delenv(self, *a, **k): pass
for case in [(3, 16, 3008, 1), (3, 16, 3008, 4), (3, 64, 3008, 1), (3, None, 3008, 1), (1, 16, 16384, 1)]:
    try:
        t.test_repeated_calls_give_the_same_bits(*case, KeepEnv()); print(case, "the same bits (rule)")
    except AssertionError:
        print(case, "different bits (rule)")
PY
timeout 60 python3 /tmp/rule.py > $L/rule.txt 2>&1; el "rule rc $? $(cat $L/rule.txt | tr '\n' ' ')"
el done
