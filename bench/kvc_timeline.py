#!/usr/bin/env python3
"""Where a block of the Hopper kv-cache kernel spends its time: per-block phase timestamps from a diagnostic build.

Install the Python package with the timeline compiled in (nothing else changes; see src/kernels/sm90/timeline.cuh):

    CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DFLASHATTN_TIMELINE=1 -DFLASHATTN_PY_STATIC_CXX_RUNTIME=OFF" \\
        FLASHATTN_CUDA_ARCHS=90a python3 -m pip install --no-build-isolation --no-deps -C build-dir=/tmp/build_tl \\
        --target /tmp/site_tl .

(FLASHATTN_PY_STATIC_CXX_RUNTIME=OFF drops the export list that leaves the module nothing but PyInit__C, so the
timeline's reader is visible; the build folder of its own keeps the usual build's cache as it is.) Then:

    PYTHONPATH=/tmp/site_tl python3 bench/kvc_timeline.py --shapes 16,8,1024 16,8,16384 --pages 0 16

For each shape (batch, kv heads, cache length; 32 query heads, head dim 128, bf16, one query row, causal) and page
size (0: dense), runs flash_attn_with_kvcache a few times and reads the last launch's timestamps. Prints, over the
blocks, the median and mean microseconds of each phase (consumer thread 0's view from Q on), when blocks started and
ended against the first block's start, and the kernel's time by CUDA events (the L2 flushed before it, as
bench/bench_decode.py times a call; with FLASHATTN_BENCH_FLUSH=read the flush reads its buffer, as there). With
--graph the call is replayed from a CUDA graph behind a GPU sleep, so the events hold the GPU's time alone, and
"outside its blocks' span" (the events' time less the first block's start to the last block's end: the launch, and
whatever the call waits for after its last block) is worth reading.
"""
import argparse
import ctypes
import importlib
import os
import statistics
import sys

import torch

from flashattn import flash_attn_with_kvcache

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_decode as bd  # noqa: E402  (graph_of)

EVENTS = ["start", "first_issue", "q_ready", "first_k", "first_pv", "last_k", "last_v", "last_pv", "stored",
          "init_done", "synced", "sm", "global_start", "global_end", "unit", "split", "epilogue", "producer", "pieces",
          "page_read", "order_begin0", "order_read0", "order_sorted0", "order_begin1", "order_read1", "order_sorted1",
          "merging", "global_merging"] + [f"progress{k}" for k in range(9)] + ["tiles"]
MAX_BLOCKS = 8192  # kKvcTimelineBlocks
PHASES = [("start", "init_done"), ("start", "synced"), ("start", "producer"), ("producer", "pieces"),
          ("pieces", "page_read"), ("page_read", "first_issue"), ("start", "first_issue"), ("start", "q_ready"),
          ("start", "first_k"), ("first_k", "first_pv"), ("first_pv", "last_k"), ("last_k", "last_v"),
          ("last_v", "last_pv"), ("last_pv", "epilogue"), ("epilogue", "stored"), ("start", "stored"),
          # splits merged in a cluster: the wait for the cluster's other splits, then the merge and its stores
          ("epilogue", "merging"), ("merging", "stored"),
          # pages in address order (FLASHATTN_KVC_PAGE_ORDER): the first two windows' sorts, where a block has them
          ("start", "order_begin0"), ("order_begin0", "order_read0"), ("order_read0", "order_sorted0"),
          ("start", "order_begin1"), ("order_begin1", "order_read1"), ("order_read1", "order_sorted1")]


def library():
    lib = ctypes.CDLL(importlib.import_module("flashattn._C").__file__)
    try:
        fn = lib.flashattn_debug_kvc_timeline
    except AttributeError:
        raise SystemExit("this build has no timeline reader: install as the docstring says")
    fn.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int]
    return fn


def inputs(batch, nheads_k, cache_len, page, gen, sorted_rows=False):
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(batch, 1, 32, 128, device=dev, dtype=dt, generator=gen)
    k = torch.randn(batch, cache_len, nheads_k, 128, device=dev, dtype=dt, generator=gen)
    v = torch.randn_like(k)
    table = None
    if page:  # pages in a random order, as bench/bench_decode.py places them
        blocks = batch * cache_len // page
        order = torch.randperm(blocks, device=dev, generator=gen)
        if sorted_rows:  # bench_decode.py's --page-order sorted: each sequence's row in ascending block order
            order = order.reshape(batch, -1).sort(dim=1).values.flatten()
        placed = order.argsort()
        k = k.reshape(blocks, page, nheads_k, 128)[placed].contiguous()
        v = v.reshape(blocks, page, nheads_k, 128)[placed].contiguous()
        table = order.to(torch.int32).reshape(batch, -1)
    lengths = torch.full((batch,), cache_len, dtype=torch.int32, device=dev)
    return q, k, v, lengths, table


def summarise(rows, label, kernel_us):
    ev = {name: i for i, name in enumerate(EVENTS)}
    last = max(r[ev["global_start"]] for r in rows)
    rows = [r for r in rows if r[ev["global_start"]] > last - 2_000_000]  # the last launch's blocks (2 ms window)
    t0 = min(r[ev["global_start"]] for r in rows)
    print(f"== {label}: {len(rows)} blocks, kernel {kernel_us:.1f} us (CUDA events)")
    ghz = []
    for r in rows:
        dt = r[ev["global_end"]] - r[ev["global_start"]]
        if dt > 0:
            ghz.append((r[ev["stored"]] - r[ev["start"]]) / dt)
    clock = statistics.median(ghz)
    print(f"   SM clock from the blocks' own timers: {clock:.2f} GHz (median)")
    for a, b in PHASES:
        us = [(r[ev[b]] - r[ev[a]]) / clock / 1e3 for r in rows if r[ev[a]] and r[ev[b]]]
        if not us:  # no block marked both (the page order's, where it is off)
            continue
        print(f"   {a:>11s} -> {b:<11s} median {statistics.median(us):7.2f} us  mean {statistics.mean(us):7.2f}"
              f"  min {min(us):7.2f}  max {max(us):7.2f}")
    starts = sorted((r[ev["global_start"]] - t0) / 1e3 for r in rows)
    ends = sorted((r[ev["global_end"]] - t0) / 1e3 for r in rows)
    q = lambda xs, f: xs[min(len(xs) - 1, int(f * len(xs)))]
    print(f"   block starts after the first: median {q(starts, .5):.2f} us, 90% {q(starts, .9):.2f}, "
          f"last {starts[-1]:.2f}")
    print(f"   block ends after the first start: first {ends[0]:.2f} us, median {q(ends, .5):.2f}, "
          f"90% {q(ends, .9):.2f}, last {ends[-1]:.2f}")
    print(f"   the call's time outside its blocks' span (first start to last end): "
          f"{kernel_us - (ends[-1] - starts[0]):.2f} us")
    sms = len({r[ev["sm"]] for r in rows})
    print(f"   SMs used: {sms}")
    balance(rows, ev, t0)
    cluster_tail(rows, ev, t0, clock)
    stream_rate(rows, ev, t0)


def cluster_tail(rows, ev, t0, clock):
    """Splits merged in a cluster (or by the unit's last block, FLASHATTN_KVC_LAST_MERGE=1: only that block marks the
    merge): per unit, when its last split reached the epilogue, when the merge could start (the cluster's barrier
    passed, or the last block's count), and when its blocks ended (the globaltimer, each block's clock converted from
    its own start), in microseconds after the first block's start. The kernel ends at the last unit's end; the part
    after its last split's epilogue is what the merge adds to the call."""
    if not any(r[ev["global_merging"]] for r in rows):
        if any(r[ev["split"]] for r in rows):
            print("   split, but no block passed a cluster merge: the combine kernel merged the splits (its time is "
                  "outside the blocks' span)")
        return
    def at(r, event):  # an event's global time, from the block's own start and clock
        return (r[ev["global_start"]] - t0) / 1e3 + (r[ev[event]] - r[ev["start"]]) / clock / 1e3
    units = {}
    for r in rows:
        units.setdefault(r[ev["unit"]], []).append(r)
    units = {unit: blocks for unit, blocks in units.items() if any(r[ev["global_merging"]] for r in blocks)}
    tails = []
    for unit, blocks in units.items():
        epilogue = max(at(r, "epilogue") for r in blocks)
        merging = max((r[ev["global_merging"]] - t0) / 1e3 for r in blocks if r[ev["global_merging"]])
        end = max((r[ev["global_end"]] - t0) / 1e3 for r in blocks)
        tails.append((end, epilogue, merging, unit))
    tails.sort()
    waits = statistics.median([m - e for _, e, m, _ in tails])
    merges = statistics.median([x - m for x, _, m, _ in tails])
    print(f"   merged units ({len(tails)}): last split's epilogue -> merge start median {waits:.2f} us, "
          f"merge start -> end median {merges:.2f}")
    end, epilogue, merging, unit = tails[-1]
    latest = max(at(r, "epilogue") for r in rows)
    print(f"   the last unit ({unit}): last split's epilogue at {epilogue:.2f} us, merge started "
          f"{merging:.2f}, ended {end:.2f}; the latest epilogue of any block {latest:.2f}")


PROGRESS_MARKS = 9  # kvc_progress's: K tile k (tiles - 1) / 8 of a block's tiles, k = 0 ... 8
TILE_BYTES = 2 * 64 * 128 * 2  # a tile's K and V: 64 key-rows of head dim 128 in bf16 (inputs()'s shapes)
RATE_BINS = 24


def stream_rate(rows, ev, t0):
    """Whether the grid reads as fast at its end as through its middle. Each block marks the global time at nine of
    its K tiles' landings (0, an eighth of its tiles, ..., its last); between two marks it is taken to read at a steady
    rate. Summed over the blocks in RATE_BINS bins from the first mark to the last: the grid's read rate (TB/s, K and
    V) and the blocks still streaming. If the blocks that end late read no faster once the early ones have ended, the
    rate falls in the last bins, and work moved to the early SMs would end the call sooner; if it holds, the
    late blocks took up what the early ones left. Then, by SMs in index order 16 at a time (neighbouring indices tend
    to share a GPC), the mean rate of their blocks (GB/s a block) over the first half of each stream, the second half,
    and its last eighth."""
    marks = [ev[f"progress{k}"] for k in range(PROGRESS_MARKS)]
    blocks = []
    for r in rows:
        tiles = r[ev["tiles"]]
        if tiles < PROGRESS_MARKS or not all(r[m] for m in marks):
            continue
        at = [(r[m] - t0) / 1e3 for m in marks]
        done = [k * (tiles - 1) // (PROGRESS_MARKS - 1) for k in range(PROGRESS_MARKS)]
        blocks.append((r[ev["sm"]], at, done))
    if not blocks:
        print("   stream rate: no block marked its progress (a build without it, or blocks of fewer than 9 tiles)")
        return
    first, last = min(b[1][0] for b in blocks), max(b[1][-1] for b in blocks)
    width = (last - first) / RATE_BINS
    rate, active = [0.0] * RATE_BINS, [0] * RATE_BINS
    for _, at, done in blocks:
        for k in range(PROGRESS_MARKS - 1):
            t_a, t_b = at[k], at[k + 1]
            if t_b <= t_a:
                continue
            per_us = (done[k + 1] - done[k]) * TILE_BYTES / (t_b - t_a)  # bytes a microsecond
            for i in range(RATE_BINS):
                lo, hi = first + i * width, first + (i + 1) * width
                overlap = min(hi, t_b) - max(lo, t_a)
                if overlap > 0:
                    rate[i] += per_us * overlap / width
        for i in range(RATE_BINS):
            lo, hi = first + i * width, first + (i + 1) * width
            if at[0] < hi and at[-1] > lo:
                active[i] += 1
    print(f"   the grid's read rate ({len(blocks)} blocks, K tile landings), {width:.1f} us bins from "
          f"{first:.1f} us:")
    print("     " + " ".join(f"{x / 1e6:5.2f}" for x in rate) + "  TB/s")
    print("     " + " ".join(f"{n:5d}" for n in active) + "  blocks streaming")

    def gbs(at, done, a, b):  # GB/s between marks a and b
        return (done[b] - done[a]) * TILE_BYTES / (at[b] - at[a]) / 1e3 if at[b] > at[a] else float("nan")
    groups = {}
    for sm, at, done in blocks:
        groups.setdefault(sm // 16, []).append((gbs(at, done, 0, 4), gbs(at, done, 4, 8), gbs(at, done, 7, 8),
                                                at[-1]))
    print("   by SM index / 16: GB/s a block over the first half, second half, last eighth; mean last landing (us)")
    for g, v in sorted(groups.items()):
        mean = lambda i: statistics.mean(x[i] for x in v)
        print(f"     {g}: {mean(0):6.1f} {mean(1):6.1f} {mean(2):6.1f}  {mean(3):7.1f}  ({len(v)} blocks)")


def correlation(pairs):
    if len(pairs) < 3:
        return float("nan")
    xs, ys = [a for a, _ in pairs], [b for _, b in pairs]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in pairs)
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else float("nan")


def balance(rows, ev, t0):
    """How evenly the blocks end, and whether the late ones are late by SM, by unit (cluster) or alone: if every
    block ended at the blocks' mean end, the call would end that much sooner."""
    end = {i: (r[ev["global_end"]] - t0) / 1e3 for i, r in enumerate(rows)}
    ends = list(end.values())
    print(f"   ends: mean {statistics.mean(ends):.2f} us, last {max(ends):.2f} (last - mean "
          f"{max(ends) - statistics.mean(ends):.2f}), stdev {statistics.pstdev(ends):.2f}")
    by_sm, by_unit = {}, {}
    for i, r in enumerate(rows):
        by_sm.setdefault(r[ev["sm"]], []).append(i)
        by_unit.setdefault(r[ev["unit"]], []).append(i)
    # Blocks sharing an SM, and the splits of one unit: how alike their ends are (1: the place decides; 0: not).
    sm_pairs = [(end[v[0]], end[v[1]]) for v in by_sm.values() if len(v) >= 2]
    unit_pairs = [(end[v[0]], end[v[1]]) for v in by_unit.values() if len(v) >= 2]
    sm_spread = [max(end[i] for i in v) - min(end[i] for i in v) for v in by_sm.values() if len(v) >= 2]
    unit_spread = [max(end[i] for i in v) - min(end[i] for i in v) for v in by_unit.values() if len(v) >= 2]
    if sm_pairs:
        print(f"   blocks on one SM: end correlation {correlation(sm_pairs):.2f}, "
              f"mean spread within an SM {statistics.mean(sm_spread):.2f} us")
    if unit_pairs:
        print(f"   splits of one unit: end correlation {correlation(unit_pairs):.2f}, "
              f"mean spread within a unit {statistics.mean(unit_spread):.2f} us")
    sm_last = sorted((max(end[i] for i in v), sm) for sm, v in by_sm.items())
    fmt = lambda xs: " ".join(f"{sm}:{e:.1f}" for e, sm in xs)
    print(f"   SMs by their last end, earliest: {fmt(sm_last[:8])}")
    print(f"   latest: {fmt(sm_last[-8:])}")
    # The SMs in index order, 16 at a time (neighbouring indices tend to share a GPC): their blocks' mean end.
    buckets = {}
    for sm, v in by_sm.items():
        buckets.setdefault(sm // 16, []).extend(end[i] for i in v)
    print("   mean end by SM index / 16: " + " ".join(f"{k}:{statistics.mean(v):.1f}"
                                                    for k, v in sorted(buckets.items())))


GATE_CYCLES = 25_000 * bd.GATE_CYCLES_PER_US  # --graph: the GPU sleep ahead of each timed call (25 ms), longer than
# the host's queueing of the flush and the replay
WARM_KEYS = 256  # --warm-code's call: its cache length (decode_splits.py's warming call has the same)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=["16,8,1024", "16,8,16384", "64,8,1024"],
                    help="batch,nheads_k,cache_len")
    ap.add_argument("--pages", type=int, nargs="+", default=[0, 16])
    ap.add_argument("--calls", type=int, default=1, help="timed calls a shape (each summarised)")
    ap.add_argument("--page-order", choices=["random", "sorted"], default="random",
                    help="pages of the pool in a random order, or the same with each block-table row sorted")
    ap.add_argument("--splits", type=int, default=0, help="num_splits (0: the heuristic's)")
    ap.add_argument("--graph", action="store_true",
                    help="time the call replayed from a CUDA graph behind a GPU sleep (bench/bench_decode.py's gate), "
                         "so the events see the GPU's time alone; by default the eager call's events include the "
                         "Python layer")
    ap.add_argument("--warm-code", action="store_true",
                    help=f"a small call of the same kind (batch 1, {WARM_KEYS} keys) between the flush and the timed "
                         "call, so the kernel's code is in L2 (its few blocks' rows are overwritten by the timed "
                         "call's)")
    args = ap.parse_args()
    fn = library()
    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    buf = (ctypes.c_ulonglong * (MAX_BLOCKS * len(EVENTS)))()
    for shape in args.shapes:
        batch, nheads_k, cache_len = (int(x) for x in shape.split(","))
        for page in args.pages:
            q, k, v, lengths, table = inputs(batch, nheads_k, cache_len, page, gen, args.page_order == "sorted")
            call = lambda: flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, block_table=table, causal=True,
                                                   num_splits=args.splits)
            warm = None
            if args.warm_code:
                wq, wk, wv, wlengths, wtable = inputs(1, nheads_k, WARM_KEYS, page, gen)
                warm = lambda: flash_attn_with_kvcache(wq, wk, wv, cache_seqlens=wlengths, block_table=wtable,
                                                       causal=True)
            for _ in range(3):
                call()
            timed = call
            if args.graph:
                timed = bd.graph_of(call).replay
            for _ in range(args.calls):
                if args.graph:
                    torch.cuda._sleep(GATE_CYCLES)  # the GPU busy while the host queues the flush and the call
                if bd.FLUSH_BY_READING:  # FLASHATTN_BENCH_FLUSH=read: L2 left full of clean lines
                    flush.view(torch.int64).sum()
                else:
                    flush.zero_()
                if warm:
                    warm()
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                timed()
                stop.record()
                torch.cuda.synchronize()
                if fn(buf, MAX_BLOCKS) != 0:
                    raise SystemExit("flashattn_debug_kvc_timeline failed")
                rows = [buf[i * len(EVENTS):(i + 1) * len(EVENTS)] for i in range(MAX_BLOCKS)]
                rows = [r for r in rows if r[EVENTS.index("global_start")] != 0]
                summarise(rows, f"batch {batch}, {nheads_k} kv heads, cache {cache_len}, "
                                f"{'dense' if not page else f'page {page}'}", start.elapsed_time(stop) * 1e3)


if __name__ == "__main__":
    main()
