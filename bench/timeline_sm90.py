#!/usr/bin/env python3
"""Where a block of the Hopper forward spends its time: per-block phase timestamps from a diagnostic build.

Build the library with the timeline compiled in (nothing else changes; see src/kernels/sm90/timeline.cuh):

    cmake -S . -B build-timeline -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a \\
        -DFLASHATTN_BUILD_PYTHON=OFF -DCMAKE_CUDA_FLAGS=-DFLASHATTN_TIMELINE=1
    ninja -C build-timeline libflashattn.so
    python3 bench/timeline_sm90.py --lib build-timeline/libflashattn.so --seqlen 512 --hdim 128

Runs the forward on the standard sweep's shape (bf16, batch x seqlen = 16384, hidden 2048) and prints, over the
blocks, the mean and median microseconds of each phase (consumer warpgroup 0's view) and the gap between one block's
end and the next block's start on the same SM.

With --tiles, the persistent kernel's view instead (FLASHATTN_SM90_PERSISTENT=1 is set for the run): over its work
tiles, the mean and median microseconds from one event to the next (Q issued, Q landed, first S done, last P V done,
output stores issued) and from one tile's stores to the next tile's first S, as consumer warpgroup 0 sees them.
"""
import argparse
import ctypes
import os
import statistics

import torch

from bench_sweep import HIDDEN, TOKENS, Flashattn

TILE_EVENTS = ["q_issued", "q_arrived", "first_s", "last_pv", "stored", "entered", "k0_landed", "last_v_landed",
               "global_ns"]
TILE_BLOCKS, TILES = 1024, 64  # kTileTimelineBlocks, kTileTimelineTiles of src/kernels/sm90/timeline.cuh
EVENTS = ["start", "q_issued", "q_arrived", "first_s", "last_pv", "stored0", "stored1", "producer_done",
          "epilogue_synced", "epilogue_staged", "placed", "lse_written", "sm", "global_start"]
MAX_BLOCKS = 16384


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--tiles", action="store_true", help="the persistent kernel's per-work-tile phases")
    args = ap.parse_args()
    if args.tiles:
        os.environ["FLASHATTN_SM90_PERSISTENT"] = "1"

    fa = Flashattn(args.lib)
    fa.lib.flashattn_debug_timeline.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int]
    s, d = args.seqlen, args.hdim
    b, h = TOKENS // s, HIDDEN // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out, lse = torch.empty_like(q), torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    fwd = fa.make_fwd(q, k, v, out, lse, args.causal)
    for _ in range(5):  # warm; the last launch's timestamps are read
        fa.check(fa.lib.flashattn_forward(ctypes.byref(fwd)), "fwd")
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fa.check(fa.lib.flashattn_forward(ctypes.byref(fwd)), "fwd")
    stop.record()
    torch.cuda.synchronize()
    kernel_ms = start.elapsed_time(stop)

    if args.tiles:
        print_tiles(fa, args, kernel_ms)
        return
    buf = (ctypes.c_ulonglong * (MAX_BLOCKS * len(EVENTS)))()
    assert fa.lib.flashattn_debug_timeline(buf, MAX_BLOCKS) == 0
    rows = [dict(zip(EVENTS, buf[i * len(EVENTS):(i + 1) * len(EVENTS)])) for i in range(MAX_BLOCKS)]
    rows = [r for r in rows if r["start"] and r["stored0"] > r["start"]]
    if not rows:
        raise SystemExit("no block marks: the persistent kernel ran this shape (its view is --tiles; "
                         "FLASHATTN_SM90_PERSISTENT=0 runs one block a tile)")
    # Cycles to microseconds: the SM clock from blocks of one SM (clock64 against the global nanosecond timer).
    by_sm = {}
    for r in rows:
        by_sm.setdefault(r["sm"], []).append(r)
    rates = []
    for blocks in by_sm.values():
        blocks.sort(key=lambda r: r["start"])
        if len(blocks) > 1 and blocks[-1]["global_start"] > blocks[0]["global_start"]:
            rates.append((blocks[-1]["start"] - blocks[0]["start"]) / (blocks[-1]["global_start"] -
                                                                       blocks[0]["global_start"]) * 1e3)
    cycles_per_us = statistics.median(rates)
    us = lambda c: c / cycles_per_us
    phases = {
        "start -> work tile placed (producer)": lambda r: r["placed"] - r["start"],
        "start -> Q issued (producer)": lambda r: r["q_issued"] - r["start"],
        "start -> Q landed (consumer 0)": lambda r: r["q_arrived"] - r["start"],
        "Q landed -> first S done": lambda r: r["first_s"] - r["q_arrived"],
        "first S -> last P V done": lambda r: r["last_pv"] - r["first_s"],
        "last P V -> output written (wg 0)": lambda r: r["stored0"] - r["last_pv"],
        "  of which: last P V -> LSE written": lambda r: r["lse_written"] - r["last_pv"],
        "  of which: -> all warps past the first barrier": lambda r: r["epilogue_synced"] - r["lse_written"],
        "  of which: -> output staged": lambda r: r["epilogue_staged"] - r["epilogue_synced"],
        "  of which: -> stores issued": lambda r: r["stored0"] - r["epilogue_staged"],
        "last P V -> output written (wg 1)": lambda r: r["stored1"] - r["last_pv"] if r["stored1"] else 0,
        "start -> end (both written, producer done)": lambda r: max(r["stored0"], r["stored1"], r["producer_done"])
        - r["start"],
    }
    print(f"hdim {d} seqlen {s} batch {b} heads {h} causal {args.causal}: {len(rows)} blocks on {len(by_sm)} SMs, "
          f"kernel {kernel_ms * 1e3:.1f} us, SM clock {cycles_per_us:.0f} MHz")
    for name, f in phases.items():
        vals = [us(f(r)) for r in rows]
        print(f"  {name:44s} mean {statistics.mean(vals):7.2f} us  median {statistics.median(vals):7.2f} us")
    gaps = []
    for blocks in by_sm.values():
        for a, c in zip(blocks, blocks[1:]):
            gaps.append(us(c["start"] - max(a["stored0"], a["stored1"], a["producer_done"])))
    if gaps:
        print(f"  {'gap: a block ends -> the next starts (same SM)':44s} mean {statistics.mean(gaps):7.2f} us  "
              f"median {statistics.median(gaps):7.2f} us")
    per_sm = [len(v) for v in by_sm.values()]
    print(f"  blocks an SM: min {min(per_sm)} max {max(per_sm)}")


def print_tiles(fa, args, kernel_ms):
    """The persistent kernel's per-work-tile phases (its last launch; a block's tiles in the order it ran them)."""
    fa.lib.flashattn_debug_tile_timeline.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int]
    n = len(TILE_EVENTS)
    buf = (ctypes.c_ulonglong * (TILE_BLOCKS * TILES * n))()
    assert fa.lib.flashattn_debug_tile_timeline(buf, TILE_BLOCKS) == 0
    blocks = torch.cuda.get_device_properties(0).multi_processor_count  # the persistent grid
    phases = {
        "Q issued -> Q landed": ("q_issued", "q_arrived"),
        "Q landed -> first S done": ("q_arrived", "first_s"),
        "first S -> last P V done": ("first_s", "last_pv"),
        "last P V -> stores issued": ("last_pv", "stored"),
    }
    phases.update({
        "last V landed -> last P V done": ("last_v_landed", "last_pv"),
        "entered -> first K landed": ("entered", "k0_landed"),
        "first K landed -> first S done": ("k0_landed", "first_s"),
    })
    # Between two consecutive tiles a (the earlier) and c: each gap's cycles from the two tiles' rows.
    gaps = {
        "stores issued -> next tile's first S done": lambda a, c: c["first_s"] - a["stored"],
        "stores issued -> next tile entered": lambda a, c: c["entered"] - a["stored"],
        # the next tile's Q goes out before this tile's stores: how long before
        "next tile's Q issued -> stores issued": lambda a, c: a["stored"] - c["q_issued"],
    }
    whole = "a work tile (stores to stores)"
    vals = {name: [] for name in [*phases, *gaps, whole]}  # cycles
    rates, tiles_run = [], []
    for blk in range(blocks):
        rows = [dict(zip(TILE_EVENTS, buf[(blk * TILES + t) * n:(blk * TILES + t + 1) * n])) for t in range(TILES)]
        # A block's tiles of this launch: its stores' global times increase (rows past them are older launches').
        if not rows[0]["stored"]:
            continue
        run = [rows[0]]
        for r in rows[1:]:
            if not (r["stored"] > run[-1]["stored"] and r["global_ns"] > run[-1]["global_ns"]):
                break
            run.append(r)
        if len(run) < 2:
            continue
        tiles_run.append(len(run))
        rates.append((run[-1]["stored"] - run[0]["stored"]) / (run[-1]["global_ns"] - run[0]["global_ns"]) * 1e3)
        for r in run:
            for name, (a, b) in phases.items():
                vals[name].append(r[b] - r[a])
        for a, c in zip(run, run[1:]):
            for name, gap in gaps.items():
                vals[name].append(gap(a, c))
            vals[whole].append(c["stored"] - a["stored"])
    cycles_per_us = statistics.median(rates)
    us = lambda c: c / cycles_per_us
    s, d = args.seqlen, args.hdim
    print(f"hdim {d} seqlen {s} causal {args.causal}, persistent: {len(tiles_run)} blocks, {sum(tiles_run)} work "
          f"tiles ({min(tiles_run)}-{max(tiles_run)} a block), kernel {kernel_ms * 1e3:.1f} us, SM clock "
          f"{cycles_per_us:.0f} MHz")
    for name, cycles in vals.items():
        v = [us(c) for c in cycles]
        print(f"  {name:40s} mean {statistics.mean(v):7.2f} us  median {statistics.median(v):7.2f} us")


if __name__ == "__main__":
    main()
