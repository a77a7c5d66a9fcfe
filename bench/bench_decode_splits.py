"""Split-KV decode against the split count: graph-replayed time of flash_attn_with_kvcache at small batches for
num_splits 0 (flashattn's heuristic) and a range of fixed counts, to check the heuristic where the decode is
latency-bound (batch 1) rather than bandwidth-bound, with SDPA's cuDNN backend on the same shape beside it.

    python3 bench/bench_decode_splits.py [--batches 1 4] [--nheads-k 8] [--cache-lens 4096 16384 65536]
                                         [--splits 0 8 16 ...] [--json out.json]

32 query heads on 8 (or --nheads-k) kv heads, head dim 128, one query row, bf16, dense cache; times are medians of
CUDA-event timings of CUDA-graph replays (bench_decode.py's helpers), the L2 flushed before each.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_decode as bd  # noqa: E402

SPLIT_COUNTS = [0, 8, 16, 24, 32, 48, 64, 96, 128]
NHEADS_Q, NHEADS_K, HEAD_DIM = 32, [8], 128
WARMUP, REPS = 5, 30


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--nheads-k", type=int, nargs="+", default=NHEADS_K)
    ap.add_argument("--cache-lens", type=int, nargs="+", default=[4096, 16384, 65536])
    ap.add_argument("--splits", type=int, nargs="+", default=SPLIT_COUNTS, help="0: the heuristic")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    from flashattn import flash_attn_with_kvcache

    flush = torch.empty(bd.L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rows = []
    print("   hk batch cache | " + " ".join(f"{'heur' if s == 0 else s:>7}" for s in args.splits) + " |   cuDNN   (us)")
    for nheads_k in args.nheads_k:
        for batch in args.batches:
            for cache in args.cache_lens:
                q = torch.randn(batch, 1, NHEADS_Q, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
                k, v = (torch.randn(batch, cache, nheads_k, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
                        for _ in range(2))
                lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")
                times = {}
                for s in args.splits:
                    call = lambda s=s: flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, causal=True,
                                                               num_splits=s)
                    times[s] = bd.time_us(bd.graph_of(call).replay, WARMUP, REPS, flush)
                # SDPA's cuDNN backend on the (batch, heads, seq, dim) cache, as bench_decode.py runs it.
                qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
                with bd.sdpa_kernel(bd.SDPBackend.CUDNN_ATTENTION):
                    cudnn = bd.time_us(lambda: bd.F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True), WARMUP,
                                       REPS, flush)
                rows.append({"nheads_k": nheads_k, "batch": batch, "cache_len": cache, "us_by_splits": times,
                             "cudnn_us": cudnn})
                print(f"{nheads_k:5d} {batch:5d} {cache:5d} | " + " ".join(f"{times[s]:7.1f}" for s in args.splits) +
                      f" | {cudnn:7.1f}")
                del q, k, v, qt, kt, vt
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nheads_q": NHEADS_Q, "head_dim": HEAD_DIM, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
