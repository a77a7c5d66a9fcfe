# scratch: one decode shape's calls for the profiler (the kernel's third launch is the one profiled)
import sys, os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
import torch
import decode_splits as ds
from flashattn import flash_attn_with_kvcache
batch, nheads_k, cache_len, page = (int(x) for x in sys.argv[1].split(":"))
order = sys.argv[2]
gen, q = ds.shape_queries(batch, nheads_k, cache_len, 1)
k, v, lengths, table = ds.shape_cache(batch, nheads_k, cache_len, page or None, gen, order)
for _ in range(4):
    out = flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, causal=True, block_table=table, num_splits=0)
torch.cuda.synchronize()
print("ok", out.shape)
