#!/usr/bin/env bash
# scratch: cp.async copies with the next S product not beside P V (FLASHATTN_KVC_OVERLAP=0): modes 1 and 3 against the copy
# engine; where their paged results differ from the copy engine's
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps --target /tmp/site . > $L/pip.log 2>&1; el "pip rc $?"
cd /tmp; export PYTHONPATH=/tmp/site
cat > /tmp/chk.py <<'PY'
import os, torch
from flashattn import flash_attn_with_kvcache
os.environ["FLASHATTN_KVC_OVERLAP"] = "0"
for head_group in ("", "1"):
    os.environ["FLASHATTN_KVC_HEAD_GROUP"] = head_group
    for page in (None, 16):
        for splits in (0, 1, 4):
            torch.manual_seed(0)
            q = torch.randn(3, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
            if page:
                k = torch.randn(3 * 3000 // page + 3, page, 8, 128, device="cuda", dtype=torch.bfloat16); v = torch.randn_like(k)
                table = torch.randperm(k.shape[0], device="cuda")[: 3 * (3000 // page)].view(3, -1).to(torch.int32)
            else:
                k = torch.randn(3, 3000, 8, 128, device="cuda", dtype=torch.bfloat16); v = torch.randn_like(k); table = None
            lengths = torch.tensor([2990, 17, 1700], dtype=torch.int32, device="cuda")
            outs = []
            for mode in ("0", "1", "3", "0"):
                os.environ["FLASHATTN_KVC_COPY_THREADS"] = mode
                outs.append(flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, block_table=table, causal=True, num_splits=splits, return_softmax_lse=True))
            torch.cuda.synchronize()
            eq = [bool(torch.equal(outs[0][0], o[0]) and torch.equal(outs[0][1], o[1])) for o in outs[1:]]
            worst = [float((outs[0][0].float() - o[0].float()).abs().max()) for o in outs[1:]]
            per_seq = [[bool(torch.equal(outs[0][0][b], o[0][b])) for b in range(3)] for o in outs[1:3]]
            print(f"head_group {head_group or 'rule'} page {page} splits {splits}: equal {eq} max diff {worst} per sequence {per_seq}")
PY
timeout 90 python3 /tmp/chk.py > $L/chk.txt 2>&1; el "chk rc $?"
S=$root/bench/decode_splits.py
M="--env ov0=FLASHATTN_KVC_OVERLAP:0 --env ct1=FLASHATTN_KVC_COPY_THREADS:1,FLASHATTN_KVC_OVERLAP:0 --env ct3=FLASHATTN_KVC_COPY_THREADS:3,FLASHATTN_KVC_OVERLAP:0"
timeout 120 python3 $S --shapes 16:8:4096:16 16:8:4096 4:8:16384:16 --splits 0 $M > $L/a_memset.txt 2>&1; el "a rc $?"
el done
