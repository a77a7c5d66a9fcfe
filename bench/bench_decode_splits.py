"""Split-KV decode against the split count: graph-replayed time of flash_attn_with_kvcache at small batches for
num_splits 0 (flashattn's heuristic) and a range of fixed counts, to check the heuristic where the decode is
latency-bound (batch 1) rather than bandwidth-bound.

    python3 bench/bench_decode_splits.py [--batches 1 4] [--cache-lens 4096 16384 65536] [--json out.json]

32 query heads on 8 kv heads, head dim 128, one new token, bf16, dense cache; times are medians of CUDA-event timings
of CUDA-graph replays (bench_decode.py's helpers), the L2 flushed before each.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_decode as bd  # noqa: E402

SPLIT_COUNTS = [0, 8, 16, 24, 32, 48, 64, 96, 128]
NHEADS_Q, NHEADS_K, HEAD_DIM = 32, 8, 128
WARMUP, REPS = 5, 30


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--cache-lens", type=int, nargs="+", default=[4096, 16384, 65536])
    ap.add_argument("--splits", type=int, nargs="+", default=SPLIT_COUNTS, help="0: the heuristic")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    from flashattn import flash_attn_with_kvcache

    flush = torch.empty(bd.L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rows = []
    print("batch cache | " + " ".join(f"{'heur' if s == 0 else s:>7}" for s in args.splits) + "   (us)")
    for batch in args.batches:
        for cache in args.cache_lens:
            q = torch.randn(batch, 1, NHEADS_Q, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(batch, cache, NHEADS_K, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
                    for _ in range(2))
            lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")
            times = {}
            for s in args.splits:
                call = lambda s=s: flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, causal=True, num_splits=s)
                times[s] = bd.time_us(bd.graph_of(call).replay, WARMUP, REPS, flush)
            rows.append({"batch": batch, "cache_len": cache, "us_by_splits": times})
            print(f"{batch:5d} {cache:5d} | " + " ".join(f"{times[s]:7.1f}" for s in args.splits))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nheads_q": NHEADS_Q, "nheads_k": NHEADS_K, "head_dim": HEAD_DIM, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
