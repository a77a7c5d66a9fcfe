"""The kv-cache forward's time by split count, for a few decode shapes: is the heuristic's count (num_splits=0) the
best one? Each shape's dense cache is timed with num_splits 0 and each count asked for, replayed from a CUDA graph
after an L2 flush as bench/bench_decode.py times it, with PyTorch SDPA (cuDNN) on the contiguous cache beside it.

    python3 bench/decode_splits.py --shapes 1:8:1024 1:8:65536 --splits 0 4 8 16 32 --json out.json

--warm-code also times each graph with a small call of the same kind (batch 1, the shape's kv heads, 256 keys, the
same page size) replayed between the flush and the start event: the kernel's code is then in L2 (the flush evicts it,
as a real step's other kernels would), so the difference is what fetching the code from DRAM costs the call.

--touch also times each graph with every buffer of the call touched between the flush and the start event: one
element each 2 MiB (the driver's large pages) of q, the caches, the lengths, the block table and the graph's output,
read by a small kernel. Their lines stay cold (one line a page); what it warms is each page's address translation, so
the difference is what the call's first touch of each page costs after the flush (with FLASHATTN_BENCH_FLUSH=read,
whose flush kernel reads 256 MiB of other pages on the SMs).

--int-lengths passes cache_seqlens as an int (every sequence full), so the kernel has no length to load first.
--env LABEL=VAR:VALUE[,VAR:VALUE] (repeatable) adds variants: each count is also captured with those environment
variables set (the library reads them while planning, so a graph keeps the plan of its capture), and every variant
is timed in the same interleaved rounds as the plain one.

A shape is batch:nheads_k:cache_len[:page] (seqlen_q 1 or --seqlen-q, nheads_q 32, head dim 128, bf16, causal, as
bench_decode.py); with a page size the cache is paged as bench_decode.py pages it (the dense cache's storage cut into
pages, the block table a random permutation, or as --page-order says).
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_decode as bd  # noqa: E402  (its timing, shapes and SDPA call)
from bench_ab import env_set  # noqa: E402

ROUNDS = 3  # each (shape, count) timed this many times, interleaved with the others; the median is kept


def parse_shape(text):
    fields = [int(x) for x in text.split(":")]
    batch, nheads_k, cache_len = fields[:3]
    return batch, nheads_k, cache_len, (fields[3] if len(fields) > 3 else None)


def shape_queries(batch, nheads_k, cache_len, seqlen_q):
    """The shape's generator (seeded as bench_decode.py seeds it) and its queries, drawn first."""
    gen = torch.Generator(device=bd.DEVICE).manual_seed(bd.shape_seed(nheads_k, seqlen_q, batch, cache_len))
    q = torch.randn(batch, seqlen_q, bd.NHEADS_Q, bd.HEAD_DIM, device=bd.DEVICE, dtype=bd.DTYPE, generator=gen)
    return gen, q


def shape_cache(batch, nheads_k, cache_len, page, gen, page_order="random"):
    """The shape's full cache, (k, v, lengths, block table): dense, or paged as bench_decode.py pages it."""
    k_cache = torch.randn(batch, cache_len, nheads_k, bd.HEAD_DIM, device=bd.DEVICE, dtype=bd.DTYPE, generator=gen)
    v_cache = torch.randn_like(k_cache)
    lengths = torch.full((batch,), cache_len, dtype=torch.int32, device=bd.DEVICE)
    table = None
    if page:
        k_cache, v_cache, table = bd.paged_cache(k_cache, v_cache, page, gen, page_order)
    return k_cache, v_cache, lengths, table


def parse_variants(texts, first_label=""):
    """[(label, {variable: value})]: the plain run (no settings) first, then one a --env text LABEL=VAR:VALUE[,...]."""
    variants = [(first_label, {})]
    for text in texts:
        label, _, settings = text.partition("=")
        variants.append((label, dict(item.split(":", 1) for item in settings.split(","))))
    return variants


WARM_KEYS = 256  # the warming call's cache length (--warm-code)
TOUCH_BYTES = 2 << 20  # --touch: one element read a page of this size


def touching(tensors):
    """A prelude that reads one element every TOUCH_BYTES of each tensor (contiguous storage assumed; None skipped)."""
    views = []
    for t in tensors:
        if t is None:
            continue
        flat = t.reshape(-1) if t.is_contiguous() else t.as_strided((t.numel(),), (1,))
        views.append(flat[:: max(1, TOUCH_BYTES // flat.element_size())])

    def touch():
        for v in views:
            v.float().sum()
    return touch


def warming_graph(kvcache, nheads_k, page, seqlen_q, gen):
    """A graph of a small call of the same kind (batch 1, nheads_k kv heads, WARM_KEYS keys, paged as asked): what
    it leaves in L2 is the kernel's code (and its own few inputs)."""
    q = torch.randn(1, seqlen_q, bd.NHEADS_Q, bd.HEAD_DIM, device=bd.DEVICE, dtype=bd.DTYPE, generator=gen)
    k, v, lengths, table = shape_cache(1, nheads_k, WARM_KEYS, page, gen)
    return bd.graph_of(lambda: kvcache(q, k, v, cache_seqlens=lengths, causal=True, block_table=table))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", required=True, help="batch:nheads_k:cache_len")
    ap.add_argument("--splits", type=int, nargs="+", default=[0], help="num_splits values (0: the heuristic's)")
    ap.add_argument("--json", help="where to write the records")
    ap.add_argument("--int-lengths", action="store_true",
                    help="cache_seqlens as one int (the kernel reads no length from memory), not a tensor")
    ap.add_argument("--env", action="append", default=[], help="LABEL=VAR:VALUE[,VAR:VALUE]: a variant's settings")
    ap.add_argument("--warm-code", action="store_true",
                    help="also time each graph with a small call of the same kind just before it (code in L2)")
    ap.add_argument("--touch", action="store_true",
                    help="also time each graph with one element a 2 MiB page of each of its buffers read just before "
                         "it (the pages' translations warm, their lines cold)")
    ap.add_argument("--seqlen-q", type=int, default=1, help="query rows (SDPA gets the bottom-right causal mask)")
    ap.add_argument("--page-order", choices=["random", "sequential", "local", "sorted"], default="random",
                    help="the block tables' order, as bench_decode.py's option of that name (default random)")
    args = ap.parse_args()
    variants = parse_variants(args.env)
    from flashattn import flash_attn_with_kvcache

    flush = torch.empty(bd.L2_FLUSH_BYTES, dtype=torch.uint8, device=bd.DEVICE)
    records = []
    for text in args.shapes:
        batch, nheads_k, cache_len, page = parse_shape(text)
        gen, q = shape_queries(batch, nheads_k, cache_len, args.seqlen_q)
        sdpa = bd.run_sdpa(q, gen, batch, nheads_k, cache_len, bd.sdpa_has_enable_gqa(), bd.WARMUP, bd.REPS, flush)
        k_cache, v_cache, lengths, block_table = shape_cache(batch, nheads_k, cache_len, page, gen, args.page_order)
        graphs, outputs = {}, {}
        for label, settings in variants:
            with env_set(settings):  # the plan is read while a graph is captured
                for splits in args.splits:
                    seqlens = cache_len if args.int_lengths else lengths
                    key = f"{label}/{splits}" if label else splits

                    def call(s=splits, key=key, k=k_cache, v=v_cache, table=block_table, seqlens=seqlens,
                             kept=outputs):
                        out = flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True, block_table=table,
                                                      num_splits=s)
                        kept[key] = out  # the capture's is the graph's static output (the last call's)
                        return out
                    graphs[key] = bd.graph_of(call)
        preludes = {s: None for s in graphs}
        if args.touch:
            inputs = [q, k_cache, v_cache, None if args.int_lengths else lengths, block_table]
            for s in list(graphs):
                graphs[f"touch:{s}"], preludes[f"touch:{s}"] = graphs[s], touching(inputs + [outputs[s]])
        if args.warm_code:
            warm = warming_graph(flash_attn_with_kvcache, nheads_k, page, args.seqlen_q, gen)
            for s in list(graphs):
                graphs[f"warm:{s}"], preludes[f"warm:{s}"] = graphs[s], warm.replay
        times = {s: [] for s in graphs}
        for _ in range(ROUNDS):
            for splits, graph in graphs.items():
                times[splits].append(bd.time_us(graph.replay, bd.WARMUP, bd.REPS, flush, preludes[splits]))
        cudnn = sdpa["cudnn"][0]
        row = {"batch": batch, "nheads_k": nheads_k, "cache_len": cache_len, "page_size": page, "sdpa_cudnn_us": cudnn,
               "us_by_splits": {str(s): statistics.median(t) for s, t in times.items()}}
        records.append(row)
        cells = "  ".join(f"{s}: {row['us_by_splits'][str(s)]:7.1f}" for s in graphs)
        where = f"batch {batch:3d} kv heads {nheads_k:2d} cache {cache_len:6d} page {page or '-':>3}"
        print(f"{where} | cuDNN {cudnn or 0:7.1f} | {cells}", flush=True)
        del graphs, outputs, preludes, k_cache, v_cache  # the preludes' views hold the caches too
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "command": " ".join(sys.argv), "records": records}, f,
                      indent=1)


if __name__ == "__main__":
    main()
