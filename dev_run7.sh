#!/usr/bin/env bash
# scratch: is the paged call with the rule's splits the same to the bit from call to call (with and without balanced splits)?
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
cat > /tmp/chk.py <<'PY'
import os, sys, torch
from flashattn import flash_attn_with_kvcache
os.environ["FLASHATTN_KVC_PRINT_PLAN"] = "1"
for balance in ("", "0"):
    os.environ["FLASHATTN_KVC_BALANCE"] = balance
    for batch, page, length in ((3, 16, 3000), (4, 16, 65536), (3, 64, 3000), (1, 16, 16384)):
        torch.manual_seed(0)
        q = torch.randn(batch, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        pages = length // page
        k = torch.randn(batch * pages + 3, page, 8, 128, device="cuda", dtype=torch.bfloat16); v = torch.randn_like(k)
        table = torch.randperm(k.shape[0], device="cuda")[: batch * pages].view(batch, -1).to(torch.int32)
        lengths = torch.tensor([length - 10 * b - 3 for b in range(batch)], dtype=torch.int32, device="cuda")
        outs = [flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, block_table=table, causal=True,
                                        return_softmax_lse=True) for _ in range(6)]
        torch.cuda.synchronize()
        sys.stderr.flush()
        eq = [bool(torch.equal(outs[0][0], o[0]) and torch.equal(outs[0][1], o[1])) for o in outs[1:]]
        print(f"balance {balance or 'rule'} batch {batch} page {page} length {length}: same bits as the first call {eq}", flush=True)
PY
timeout 90 python3 /tmp/chk.py > $L/chk.txt 2> $L/chk_plans.txt; el "chk rc $?"
el done
