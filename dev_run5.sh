#!/usr/bin/env bash
# scratch: cp.async copies with each tile's group waited for and plain arrivals (COPY_THREADS=3) against 1 and the copy engine
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
S=$root/bench/decode_splits.py
M="--env ct=FLASHATTN_KVC_COPY_THREADS:1 --env grp=FLASHATTN_KVC_COPY_THREADS:3"
SH="16:8:4096:16 16:8:4096 4:8:1024:16 4:8:16384:16"
timeout 100 python3 $S --shapes $SH --splits 0 $M > $L/a_memset.txt 2>&1; el "a rc $?"
cat > /tmp/chk.py <<'PY'
import os, torch
from flashattn import flash_attn_with_kvcache
torch.manual_seed(0)
for page in (None, 16):
    q = torch.randn(3, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    if page:
        k = torch.randn(3 * 3000 // page + 3, page, 8, 128, device="cuda", dtype=torch.bfloat16); v = torch.randn_like(k)
        table = torch.randperm(k.shape[0], device="cuda")[: 3 * (3000 // page)].view(3, -1).to(torch.int32)
    else:
        k = torch.randn(3, 3000, 8, 128, device="cuda", dtype=torch.bfloat16); v = torch.randn_like(k); table = None
    lengths = torch.tensor([2990, 17, 1700], dtype=torch.int32, device="cuda")
    outs = []
    for mode in ("0", "1", "3"):
        os.environ["FLASHATTN_KVC_COPY_THREADS"] = mode
        outs.append(flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, block_table=table, causal=True, return_softmax_lse=True))
    print(page, [bool(torch.equal(outs[0][0], o[0]) and torch.equal(outs[0][1], o[1])) for o in outs[1:]])
PY
timeout 60 python3 /tmp/chk.py > $L/chk.txt 2>&1; el "chk rc $? $(cat $L/chk.txt | tr '\n' ' ')"
el done
