"""One decode call for Nsight Compute to profile (scripts/ncu_decode.sh, scripts/ncu_l2_policy.sh): three unprofiled
calls, then one inside the NVTX range "profiled".

    python3 bench/ncu_decode_call.py BATCH NHEADS_K CACHE_LEN PAGE [cudnn] [--flush]

bf16, one query row, 32 query heads, head dim 128, causal. PAGE 0: a dense cache; else the dense cache's rows in pages
of PAGE, in a random order (as bench/bench_decode.py pages them). "cudnn": PyTorch SDPA's cuDNN backend on the
contiguous (batch, heads, seqlen, hdim) cache instead (the peer). --flush: a 256 MiB buffer written before each call,
as bench/bench_decode.py's L2 flush (for profiles that leave the caches alone, --cache-control none).
NCU_DECODE_SPLITS (environment): num_splits for flashattn's call (default 0, the heuristic's count).
NCU_DECODE_PAGE_ORDER (environment): the block tables' order, as bench/bench_decode.py's --page-order (default random).
"""
import os
import sys

import torch

from flashattn import flash_attn_with_kvcache

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_decode as bd  # noqa: E402  (its page pool and flush size)

args = [a for a in sys.argv[1:] if a != "--flush"]
flush = torch.empty(bd.L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda") if "--flush" in sys.argv else None
batch, nheads_k, cache_len, page = (int(a) for a in args[:4])
peer = len(args) > 4 and args[4] == "cudnn"
splits = int(os.environ.get("NCU_DECODE_SPLITS", "0"))
dev, dt = "cuda", torch.bfloat16
g = torch.Generator(device=dev).manual_seed(0)
q = torch.randn(batch, 1, 32, 128, device=dev, dtype=dt, generator=g)
k = torch.randn(batch, cache_len, nheads_k, 128, device=dev, dtype=dt, generator=g)
v = torch.randn_like(k)
lengths = torch.full((batch,), cache_len, dtype=torch.int32, device=dev)
table = None
if page:
    k, v, table = bd.paged_cache(k, v, page, g, os.environ.get("NCU_DECODE_PAGE_ORDER", "random"))
if peer:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()

    def call():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
else:
    def call():
        flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, block_table=table, causal=True, num_splits=splits)


def flushed_call():
    if flush is not None:
        flush.zero_()
    call()


for _ in range(3):  # warm: the clocks, the table's and the library's first-call work
    flushed_call()
torch.cuda.synchronize()
if flush is not None:
    flush.zero_()
torch.cuda.nvtx.range_push("profiled")
call()
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
