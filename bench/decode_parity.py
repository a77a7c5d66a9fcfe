#!/usr/bin/env python3
"""Is a decode configuration's gap to cuDNN real or the run's noise? Each shape's kv-cache call (graph-replayed, as
bench/bench_decode.py times it) and PyTorch SDPA's cuDNN backend on the contiguous cache are timed in turn, round
after round, in one process; per shape it prints both medians, the ratio of the medians (cuDNN / ours: at least 1
meets the target), the spread of the per-round ratios and in how many rounds ours was at or below cuDNN's time.

    python3 bench/decode_parity.py --shapes 16:8:4096:16 16:8:4096 --rounds 9 --json out.json
    python3 bench/decode_parity.py --lowest-from sweep/bench_decode.json 12 --rounds 9

A shape is batch:nheads_k:cache_len[:page] (nheads_q 32, head dim 128, bf16, causal, seqlen_q 1 or --seqlen-q); a
paged cache is bench_decode.py's (the dense storage cut into pages, the block table a random permutation).
--lowest-from FILE N takes the N one-query-row records of a bench_decode.py sweep with the lowest SDPA/ours ratios
(with --seqlen-q, that many query rows). --eager also times the call itself (no graph) in each round, beside the
graph's replay: do the two differ where the kernel is the same?
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_decode as bd  # noqa: E402  (its timing, shapes and SDPA call)
from decode_splits import parse_shape, shape_cache, shape_queries  # noqa: E402
from decode_targets import ours_us  # noqa: E402

DEFAULT_ROUNDS = 9


def lowest_shapes(path, count, seqlen_q):
    """The `count` records of a sweep with the lowest SDPA-best / ours ratios, as shape strings."""
    rows = []
    for r in json.load(open(path))["records"]:
        ours = ours_us(r)
        if r["seqlen_q"] != seqlen_q or ours is None or not r.get("sdpa_best_us"):
            continue
        shape = f"{r['batch']}:{r['nheads_k']}:{r['cache_len']}" + (f":{r['page_size']}" if r["page_size"] else "")
        rows.append((r["sdpa_best_us"] / ours, shape))
    return [shape for _, shape in sorted(rows)[:count]]


def cudnn_call(q, gen, batch, nheads_k, cache_len):
    """SDPA's cuDNN backend on a contiguous cache of the shape, its operands drawn as bench_decode.run_sdpa draws
    them."""
    qt, k, v, kwargs = bd.sdpa_operands(q, gen, batch, nheads_k, cache_len, native_gqa=True)

    def call():
        with bd.sdpa_kernel(bd.SDPA_BACKENDS["cudnn"]):
            return bd.F.scaled_dot_product_attention(qt, k, v, **kwargs)
    return call


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="*", default=[], help="batch:nheads_k:cache_len[:page]")
    ap.add_argument("--lowest-from", nargs=2, metavar=("FILE", "N"), help="the N lowest records of a sweep")
    ap.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help=f"default {DEFAULT_ROUNDS}")
    ap.add_argument("--seqlen-q", type=int, default=1)
    ap.add_argument("--json", help="where to write the records")
    ap.add_argument("--eager", action="store_true", help="also time the call without a graph each round")
    args = ap.parse_args()
    shapes = list(args.shapes)
    if args.lowest_from:
        shapes += [s for s in lowest_shapes(args.lowest_from[0], int(args.lowest_from[1]), args.seqlen_q)
                   if s not in shapes]
    if not bd.sdpa_has_enable_gqa():
        sys.exit("this torch's SDPA has no enable_gqa")
    from flashattn import flash_attn_with_kvcache

    flush = torch.empty(bd.L2_FLUSH_BYTES, dtype=torch.uint8, device=bd.DEVICE)
    records = []
    print(f"{'shape':>18} | {'ours us':>9} {'cuDNN us':>9} | ratio  (rounds: lowest - highest, at or above)")
    for text in shapes:
        batch, nheads_k, cache_len, page = parse_shape(text)
        gen, q = shape_queries(batch, nheads_k, cache_len, args.seqlen_q)
        cudnn = cudnn_call(q, gen, batch, nheads_k, cache_len)
        k_cache, v_cache, lengths, table = shape_cache(batch, nheads_k, cache_len, page, gen)
        call = lambda: flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, causal=True,
                                               block_table=table)
        graph = bd.graph_of(call)
        ours, theirs, eager = [], [], []
        for _ in range(args.rounds):
            ours.append(bd.time_us(graph.replay, bd.WARMUP, bd.REPS, flush))
            theirs.append(bd.time_us(cudnn, bd.WARMUP, bd.REPS, flush))
            if args.eager:
                eager.append(bd.time_us(call, bd.WARMUP, bd.REPS, flush))
        ratios = [t / o for o, t in zip(ours, theirs)]
        rec = {"shape": text, "batch": batch, "nheads_k": nheads_k, "cache_len": cache_len, "page_size": page,
               "seqlen_q": args.seqlen_q, "ours_us": ours, "cudnn_us": theirs,
               "ratio_of_medians": statistics.median(theirs) / statistics.median(ours)}
        if eager:
            rec["eager_us"] = eager
        records.append(rec)
        print(f"{text:>18} | {statistics.median(ours):9.1f} {statistics.median(theirs):9.1f} | "
              f"{rec['ratio_of_medians']:.3f}  ({min(ratios):.3f} - {max(ratios):.3f}, "
              f"{sum(x >= 1 for x in ratios)} of {len(ratios)})"
              + (f" | eager {statistics.median(eager):9.1f} ({min(eager):.1f} - {max(eager):.1f}), graph "
                 f"{min(ours):.1f} - {max(ours):.1f}" if eager else ""), flush=True)
        del graph, k_cache, v_cache, cudnn
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "command": " ".join(sys.argv), "rounds": args.rounds,
                       "records": records}, f, indent=1)


if __name__ == "__main__":
    main()
