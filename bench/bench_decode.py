#!/usr/bin/env python3
"""KV-cache decode: flashattn's flash_attn_with_kvcache against PyTorch SDPA on a contiguous cache, in one process,
as achieved memory bandwidth next to the device copy bandwidth measured in the same run.

Shapes (the decode anchors' of ../shared/anchors/README.md, widened): bf16, nheads_q 32 with nheads_k 8 or 32, head
dim 128, seqlen_q 1 or 4, batch 1/4/16/64, cache length 1k/4k/16k/64k; flashattn on a dense cache and on paged ones
(page 16, 64, 256; block_table a random permutation of the blocks). Every sequence's cache is full to the length
(cache_seqlens an int32 tensor), nothing is appended (k = v = None), causal. Configurations whose K and V caches
would exceed MEMORY_BUDGET_BYTES are skipped with a note.

Metric, as the anchors': bytes = K and V of the cache read once (batch * cache_len * nheads_k * hdim * 2 bytes, for
each) + q + out; TB/s = bytes / median time. "of copy" is that over the bandwidth of a 2 GiB device-to-device copy
(bytes read + written), measured at the start of the run. flashattn runs with num_splits=0 (its heuristic) and
num_splits=1 (no split): "gain" is the no-split time over the default's, what split-KV buys. "graph us" is the
default call captured once in a CUDA graph and replayed (as serving stacks run decode): the same kernels launched
from the graph (the eager column is the GPU time of the kernels the eager call launches, see Timing).

Baseline: torch.nn.functional.scaled_dot_product_attention with each of the cuDNN, flash and efficient backends on a
contiguous (batch, heads, seqlen, hdim) cache of the same shape (the layout SDPA users keep their caches in), GQA by
enable_gqa=True (or, on a torch without it, K and V repeated to nheads_q outside the timing), over the whole cache:
is_causal=False for seqlen_q 1, a bottom-right causal boolean attn_mask (built outside the timing) for seqlen_q > 1.
A backend that refuses is recorded with null times and its error's first line. SDPA is timed once per shape; the
paged records carry the same SDPA figures. "SDPA/ours" = the fastest backend's time over flashattn's.

Timing: only the attention call, between CUDA events, after warm-up; an L2 flush (a 256 MiB memset) precedes every
timed call, outside the events, and all the calls are queued behind a GPU sleep before the GPU reaches the first,
so neither L2 residency of small caches nor the host's launch latency or Python time is measured (the eager column
is then the GPU time of the eager call's kernels; bench/host_overhead.py measures the host's side).

    python3 bench/bench_decode.py --out $OUT [--quick] [--batches 1 64] [--cache-lens 4096] [--pages 0 256]

--quick: batch 1 and 64, cache 4k and 16k, fewer repetitions. Writes $OUT/bench_decode.json ({"meta", "summary",
"records"}: one record per configuration; meta holds the copy bandwidth). Without a CUDA GPU it says so and exits 0.
"""
import argparse
import json
import math
import os
import statistics
import sys
import warnings
import zlib

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# bench_python.py and bench_sweep.py define things only at import (their main() is guarded); they sit beside this
# file, on sys.path[0].
from bench_python import first_line, run_environment
from bench_sweep import geomean

DEVICE = "cuda"  # a module constant so that a CPU dry run can point the shape code elsewhere
DTYPE = torch.bfloat16
DTYPE_BYTES = 2
HEAD_DIM = 128
NHEADS_Q = 32
NHEADS_K = [8, 32]
SEQLENS_Q = [1, 4]
BATCHES = [1, 4, 16, 64]
QUICK_BATCHES = [1, 64]
CACHE_LENS = [1024, 4096, 16384, 65536]
QUICK_CACHE_LENS = [4096, 16384]
DENSE = 0  # the page size that stands for a dense cache
PAGE_SIZES = [DENSE, 16, 64, 256]
SPLITS_HEURISTIC, SPLITS_NONE = 0, 1  # flash_attn_with_kvcache's num_splits: 0 lets flashattn choose
SDPA_BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                 "efficient": SDPBackend.EFFICIENT_ATTENTION}

WARMUP, REPS = 5, 30
# The gate the timed calls are queued behind (time_us): a GPU sleep of GATE_US_PER_CALL a call, at a clock of at most
# GATE_CYCLES_PER_US (H100's boost clock is 1.98 GHz), lengthened GATE_GROWTH-fold up to GATE_TRIES times.
GATE_US_PER_CALL = 200
GATE_CYCLES_PER_US = 2000
GATE_TRIES, GATE_GROWTH = 3, 4
QUICK_WARMUP, QUICK_REPS = 3, 10
GIB = 1 << 30
MIB = 1 << 20
MEMORY_BUDGET_BYTES = 40 * GIB  # K + V caches of one configuration: leaves room on an 80 GB H100 for the rest
COPY_BYTES = 2 * GIB            # large enough that launch overhead and L2 do not count
TRANSLATION_BYTES = 2 * MIB     # the large pages the driver maps device allocations with ("local" page order)
COPY_WARMUP, COPY_REPS = 3, 15
L2_FLUSH_BYTES = 256 * MIB      # several times any L2 so far (H100 50 MB, H200 50 MB), as triton's do_bench
# FLASHATTN_BENCH_FLUSH=read: the flush reads its buffer (leaving L2 full of clean lines) rather than zeroing it
# (full of dirty ones, as a step's other kernels leave it); for comparison only.
FLUSH_BY_READING = os.environ.get("FLASHATTN_BENCH_FLUSH") == "read"
TERA = 1e12
US_PER_MS = 1e3
US_PER_S = 1e6

JSON_NAME = "bench_decode.json"


# ----- timing ---------------------------------------------------------------------------------------------------------
def time_us(fn, warmup, reps, flush=None, prelude=None):
    """Median microseconds of fn() between CUDA events; `flush` (a tensor) is zeroed (read, with
    FLASHATTN_BENCH_FLUSH=read) before each timed call, and
    `prelude` (a function), where given, runs after the flush and before the start event.

    Every timed call is queued behind a GPU sleep (the gate) before the GPU reaches it, so the events see the GPU's
    time for fn alone: neither a per-call sync's launch latency nor a slow host (a call whose Python layer takes
    longer than the flush leaves the GPU idle between the start event and the kernel: eager records 2-20x their
    graph-replayed time in earlier sweeps) is measured. Where the gate opened before the last call was queued, the
    run is repeated behind a longer one."""
    for _ in range(warmup):
        fn()
    gate_us = reps * GATE_US_PER_CALL
    for attempt in range(GATE_TRIES):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        torch.cuda._sleep(int(gate_us * GATE_CYCLES_PER_US))
        gate_open = torch.cuda.Event()
        gate_open.record()
        for start, stop in events:
            if flush is not None:
                if FLUSH_BY_READING:
                    flush.view(torch.int64).sum()
                else:
                    flush.zero_()
            if prelude is not None:
                prelude()
            start.record()
            fn()
            stop.record()
        queued_in_time = not gate_open.query()
        torch.cuda.synchronize()
        if queued_in_time:
            break
        if attempt == GATE_TRIES - 1:
            print(f"warning: the host queued {reps} calls more slowly than a {gate_us / US_PER_MS:.0f} ms gate; "
                  "the times may hold host time", file=sys.stderr)
        gate_us *= GATE_GROWTH
    return statistics.median(start.elapsed_time(stop) for start, stop in events) * US_PER_MS


def graph_of(fn):
    """fn captured in a CUDA graph (after one call on a side stream, as torch asks): its replay launches the same
    kernels without the Python layer, the way serving stacks run decode."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def time_or_error(fn, warmup, reps, flush):
    """(median us, None), or (None, the error's first line) where the call is refused."""
    try:
        return time_us(fn, warmup, reps, flush), None
    except RuntimeError as err:  # flashattn.Error, SDPA's "no available kernel" and out-of-memory are RuntimeErrors
        return None, first_line(err)


def copy_bandwidth_tbs():
    """Device-to-device copy bandwidth in TB/s, counting the bytes read and those written: the ceiling for decode."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    us = time_us(lambda: dst.copy_(src), COPY_WARMUP, COPY_REPS)
    src = dst = None  # drop the buffers, then give their 4 GiB back before the largest caches are allocated
    torch.cuda.empty_cache()
    return 2 * COPY_BYTES / (us / US_PER_S) / TERA


# ----- shapes ---------------------------------------------------------------------------------------------------------
def cache_bytes(batch, nheads_k, cache_len):
    """Bytes of the K and V caches of one configuration."""
    return 2 * batch * cache_len * nheads_k * HEAD_DIM * DTYPE_BYTES


def traffic_bytes(batch, seqlen_q, nheads_k, cache_len):
    """The bytes a decode step must move at least: K and V read once, q read and out written."""
    q_and_out = 2 * batch * seqlen_q * NHEADS_Q * HEAD_DIM * DTYPE_BYTES
    return cache_bytes(batch, nheads_k, cache_len) + q_and_out


def tbs(nbytes, us):
    return nbytes / (us / US_PER_S) / TERA if us else None


def shape_seed(nheads_k, seqlen_q, batch, cache_len):
    """A generator seed of the shape's numbers: distinct inputs per shape, the same in every run (a checksum, not
    hash(): that of a str changes between runs, and the seed must fit 64 bits)."""
    return zlib.crc32(f"{nheads_k},{seqlen_q},{batch},{cache_len}".encode())


def bottom_right_causal_mask(seqlen_q, cache_len):
    """Boolean (seqlen_q, cache_len), True where attended: the last query sees the whole cache, query i the keys
    j <= i + cache_len - seqlen_q (flash_attn's causal alignment when seqlen_q < seqlen_k)."""
    rows = torch.arange(seqlen_q, device=DEVICE).view(-1, 1)
    return torch.arange(cache_len, device=DEVICE).view(1, -1) <= rows + (cache_len - seqlen_q)


def sdpa_has_enable_gqa():
    """Whether this torch's SDPA takes enable_gqa (2.5 and later): tried on tiny CPU tensors."""
    q, kv = torch.zeros(1, 2, 1, 8), torch.zeros(1, 1, 1, 8)
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
        return True
    except (TypeError, RuntimeError):
        return False


# ----- measurement ----------------------------------------------------------------------------------------------------
def sdpa_operands(q, gen, batch, nheads_k, cache_len, native_gqa):
    """(q in SDPA's layout, k, v, kwargs) for SDPA over a contiguous (batch, heads, seqlen, hdim) cache of the shape,
    drawn from `gen`; or, where K/V repeated to every query head would not fit the memory budget, the note (a str)."""
    seqlen_q = q.shape[1]
    repeats = NHEADS_Q // nheads_k
    if not native_gqa and repeats > 1:
        needed = cache_bytes(batch, nheads_k, cache_len) * (1 + repeats)  # the caches and their repeated copies
        if needed > MEMORY_BUDGET_BYTES:
            return (f"skipped: K/V repeated to {NHEADS_Q} heads would need {needed / GIB:.1f} GiB, over the "
                    f"{MEMORY_BUDGET_BYTES / GIB:g} GiB budget")
    k = torch.randn(batch, nheads_k, cache_len, HEAD_DIM, device=DEVICE, dtype=DTYPE, generator=gen)
    v = torch.randn(batch, nheads_k, cache_len, HEAD_DIM, device=DEVICE, dtype=DTYPE, generator=gen)
    kwargs = {}
    if native_gqa:
        kwargs["enable_gqa"] = True
    elif repeats > 1:  # no enable_gqa on this torch: SDPA gets nheads_q K/V heads, copied here, outside the timing
        k, v = k.repeat_interleave(repeats, dim=1), v.repeat_interleave(repeats, dim=1)
    qt = q.transpose(1, 2).contiguous()  # (batch, nheads_q, seqlen_q, hdim), like the cache
    if seqlen_q == 1:  # the one query is the last position: it sees the whole cache
        kwargs["is_causal"] = False
    else:  # SDPA's is_causal is top-left aligned; decode needs bottom-right, hence an explicit mask
        kwargs["attn_mask"] = bottom_right_causal_mask(seqlen_q, cache_len)
    return qt, k, v, kwargs


def run_sdpa(q, gen, batch, nheads_k, cache_len, native_gqa, warmup, reps, flush):
    """{backend: (us, error)} for SDPA over a contiguous (batch, heads, seqlen, hdim) cache of the shape."""
    operands = sdpa_operands(q, gen, batch, nheads_k, cache_len, native_gqa)
    if isinstance(operands, str):
        return {name: (None, operands) for name in SDPA_BACKENDS}
    qt, k, v, kwargs = operands
    results = {}
    for name, backend in SDPA_BACKENDS.items():
        # A refusing backend explains itself in UserWarnings before raising; keep them off the table.
        with warnings.catch_warnings(), sdpa_kernel(backend):
            warnings.simplefilter("ignore")
            results[name] = time_or_error(lambda: F.scaled_dot_product_attention(qt, k, v, **kwargs), warmup, reps,
                                          flush)
    return results


def run_flashattn(q, k_cache, v_cache, lengths, block_table, warmup, reps, flush):
    """{"flashattn": (us, error), "nosplit": (us, error)}: num_splits 0 (heuristic) and 1 (no split)."""
    from flashattn import flash_attn_with_kvcache

    results = {}
    for name, splits in (("flashattn", SPLITS_HEURISTIC), ("nosplit", SPLITS_NONE)):
        call = lambda: flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=block_table,
                                               causal=True, num_splits=splits)
        results[name] = time_or_error(call, warmup, reps, flush)
        if name == "flashattn" and results[name][0] is not None:
            # The same call replayed from a CUDA graph: the kernels' time without the host's (no k/v appended, so
            # every replay reads the same caches).
            try:
                results["graph"] = time_or_error(graph_of(call).replay, warmup, reps, flush)
            except RuntimeError as err:
                results["graph"] = (None, first_line(err))
    results.setdefault("graph", (None, "not captured: the eager call failed"))
    return results


def make_record(nheads_k, seqlen_q, batch, cache_len, page, ours, sdpa, copy_tbs):
    """One configuration's record from flashattn's and SDPA's (us, error) pairs."""
    nbytes = traffic_bytes(batch, seqlen_q, nheads_k, cache_len)
    rec = {"nheads_q": NHEADS_Q, "nheads_k": nheads_k, "head_dim": HEAD_DIM, "seqlen_q": seqlen_q, "batch": batch,
           "cache_len": cache_len, "page_size": page or None, "bytes": nbytes}
    for name in ("flashattn", "nosplit", "graph"):
        us, error = ours[name]
        rec[f"{name}_us"], rec[f"{name}_tbs"] = us, tbs(nbytes, us)
        if error:
            rec[f"{name}_error"] = error
    rec["flashattn_of_copy"] = rec["flashattn_tbs"] / copy_tbs if rec["flashattn_tbs"] and copy_tbs else None
    rec["graph_of_copy"] = rec["graph_tbs"] / copy_tbs if rec["graph_tbs"] and copy_tbs else None
    rec["split_gain"] = rec["nosplit_us"] / rec["flashattn_us"] if rec["nosplit_us"] and rec["flashattn_us"] else None
    for name in SDPA_BACKENDS:
        us, error = sdpa[name]
        rec[f"sdpa_{name}_us"], rec[f"sdpa_{name}_tbs"] = us, tbs(nbytes, us)
        if error:
            rec[f"sdpa_{name}_error"] = error
    timed = [(rec[f"sdpa_{name}_us"], name) for name in SDPA_BACKENDS if rec[f"sdpa_{name}_us"]]
    best_us, best = min(timed) if timed else (None, None)
    rec["sdpa_best"], rec["sdpa_best_us"] = best, best_us
    rec["sdpa_over_flashattn"] = best_us / rec["flashattn_us"] if best_us and rec["flashattn_us"] else None
    return rec


def paged_cache(k_cache, v_cache, page, gen, page_order="random"):
    """The dense (batch, cache_len, nheads_k, hdim) caches as a pool of pages and its block table: the pool is the
    dense cache's storage cut into pages (no second copy, so the memory budget holds); a random permutation scatters
    each sequence's pages over the pool as a paged allocator's would be after some churn. Which values a page holds
    does not matter to the timing. "sequential" keeps the dense cache's addresses exactly: what is left is the cost of
    the block-table path itself. "local" permutes the pages within each 2 MiB of the pool (and those runs among
    themselves): as scattered at the DRAM's scale as "random", but a sequence's pages share the driver's 2 MiB
    address translations as the dense cache's do (the runs line up with them where the pool starts on a 2 MiB
    boundary, as the caching allocator's large blocks do, and the pool holds a whole number of runs). "sorted" is
    "random" with each sequence's pages in ascending order: as scattered, but a sequence's pages that share a 2 MiB
    translation are read one after the other (what reading a block's pages in address order would give)."""
    batch, cache_len, nheads_k, head_dim = k_cache.shape
    blocks = batch * cache_len // page
    if page_order == "sequential":
        order = torch.arange(blocks, device=k_cache.device)
    elif page_order == "local":
        run = max(1, TRANSLATION_BYTES // (page * nheads_k * head_dim * k_cache.element_size()))
        runs = -(-blocks // run)
        within = torch.argsort(torch.rand(runs, run, device=k_cache.device, generator=gen), dim=1)
        order = (torch.randperm(runs, device=k_cache.device, generator=gen)[:, None] * run + within).flatten()
        order = order[order < blocks]
    else:
        order = torch.randperm(blocks, device=k_cache.device, generator=gen)
    if page_order == "sorted":
        order = order.view(batch, -1).sort(dim=1).values
    block_table = order.view(batch, -1).to(torch.int32)
    return (k_cache.view(blocks, page, nheads_k, head_dim), v_cache.view(blocks, page, nheads_k, head_dim),
            block_table)


def run_shape(nheads_k, seqlen_q, batch, cache_len, pages, native_gqa, copy_tbs, warmup, reps, flush,
              page_order="random", cache_layout="bshd"):
    """The records of one shape: SDPA once on its contiguous cache, then flashattn dense and for each page size.
    cache_layout "bhsd": flashattn's dense cache is a (batch, nheads_k, seqlen, hdim) tensor (SDPA's layout) passed
    as its (batch, seqlen, nheads_k, hdim) view; paged records are refused (a page pool is one contiguous tensor)."""
    gen = torch.Generator(device=DEVICE).manual_seed(shape_seed(nheads_k, seqlen_q, batch, cache_len))
    q = torch.randn(batch, seqlen_q, NHEADS_Q, HEAD_DIM, device=DEVICE, dtype=DTYPE, generator=gen)
    # SDPA's caches are freed when it returns, before flashattn's are made: one shape's caches at a time.
    sdpa = run_sdpa(q, gen, batch, nheads_k, cache_len, native_gqa, warmup, reps, flush)
    if cache_layout == "bhsd":
        k_cache, v_cache = (torch.randn(batch, nheads_k, cache_len, HEAD_DIM, device=DEVICE, dtype=DTYPE,
                                        generator=gen).transpose(1, 2) for _ in range(2))
    else:
        k_cache = torch.randn(batch, cache_len, nheads_k, HEAD_DIM, device=DEVICE, dtype=DTYPE, generator=gen)
        v_cache = torch.randn(batch, cache_len, nheads_k, HEAD_DIM, device=DEVICE, dtype=DTYPE, generator=gen)
    lengths = torch.full((batch,), cache_len, dtype=torch.int32, device=DEVICE)
    records = []
    refused = lambda why: {name: (None, why) for name in ("flashattn", "nosplit", "graph")}
    for page in pages:
        if page == DENSE:
            ours = run_flashattn(q, k_cache, v_cache, lengths, None, warmup, reps, flush)
        elif cache_layout == "bhsd":
            ours = refused("paged caches only in the (batch, seqlen, nheads_k, hdim) layout")
        elif cache_len % page:
            ours = refused(f"cache length {cache_len} is not a multiple of page {page}")
        else:
            k_pool, v_pool, block_table = paged_cache(k_cache, v_cache, page, gen, page_order)
            ours = run_flashattn(q, k_pool, v_pool, lengths, block_table, warmup, reps, flush)
        records.append(make_record(nheads_k, seqlen_q, batch, cache_len, page, ours, sdpa, copy_tbs))
    return records


# ----- report ---------------------------------------------------------------------------------------------------------
def length_label(n):
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def table_header():
    return (f"{'hk':>3} {'sq':>2} {'batch':>5} {'cache':>5} {'page':>5} | {'ours us':>8} {'TB/s':>5} {'of copy':>7} | "
            f"{'graph us':>8} {'of copy':>7} | {'no-split':>8} {'gain':>5} | {'SDPA us':>8} {'backend':>9} "
            f"{'SDPA/ours':>9}")


def table_row(rec):
    num = lambda x, width, digits: f"{x:{width}.{digits}f}" if x else f"{'-':>{width}}"
    return (f"{rec['nheads_k']:3d} {rec['seqlen_q']:2d} {rec['batch']:5d} {length_label(rec['cache_len']):>5} "
            f"{str(rec['page_size'] or 'dense'):>5} | {num(rec['flashattn_us'], 8, 1)} "
            f"{num(rec['flashattn_tbs'], 5, 2)} {num(rec['flashattn_of_copy'], 7, 2)} | "
            f"{num(rec['graph_us'], 8, 1)} {num(rec['graph_of_copy'], 7, 2)} | "
            f"{num(rec['nosplit_us'], 8, 1)} {num(rec['split_gain'], 5, 2)} | {num(rec['sdpa_best_us'], 8, 1)} "
            f"{rec['sdpa_best'] or '-':>9} {num(rec['sdpa_over_flashattn'], 9, 2)}")


def new_errors(rec, seen):
    """Lines for the errors of a record not printed before: the same refusal recurs over most shapes."""
    lines = []
    for key in sorted(k for k in rec if k.endswith("_error")):
        what = key[:-len("_error")]
        if (what, rec[key]) not in seen:
            seen.add((what, rec[key]))
            lines.append(f"    {what}: {rec[key]} (printed once)")
    return lines


def summarize(records):
    """Geometric means over the records with both figures (None where there are none; NaN is not JSON)."""
    def mean_of(key, keep=lambda r: True):
        mean = geomean([r[key] for r in records if r[key] and keep(r)])
        return None if math.isnan(mean) else mean

    ratios = [r["sdpa_over_flashattn"] for r in records if r["sdpa_over_flashattn"]]
    return {"sdpa_over_flashattn_geomean": mean_of("sdpa_over_flashattn"),
            "sdpa_over_flashattn_min": min(ratios) if ratios else None,
            "flashattn_of_copy_geomean": mean_of("flashattn_of_copy"),
            "graph_of_copy_geomean": mean_of("graph_of_copy"),
            "dense_flashattn_of_copy_geomean": mean_of("flashattn_of_copy", lambda r: r["page_size"] is None),
            "paged_flashattn_of_copy_geomean": mean_of("flashattn_of_copy", lambda r: r["page_size"] is not None),
            "split_gain_geomean": mean_of("split_gain")}


def print_summary(summary):
    show = lambda x: f"{x:.3f}" if x is not None else "-"
    print(f"geometric means: flashattn of copy {show(summary['flashattn_of_copy_geomean'])} (dense "
          f"{show(summary['dense_flashattn_of_copy_geomean'])}, paged "
          f"{show(summary['paged_flashattn_of_copy_geomean'])}; graph replay "
          f"{show(summary['graph_of_copy_geomean'])}); SDPA/ours "
          f"{show(summary['sdpa_over_flashattn_geomean'])} (min "
          f"{show(summary['sdpa_over_flashattn_min'])}); split gain {show(summary['split_gain_geomean'])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out", help=f"folder for {JSON_NAME} (default ./out)")
    ap.add_argument("--quick", action="store_true", help=f"batches {QUICK_BATCHES}, cache lengths {QUICK_CACHE_LENS}, "
                                                         f"{QUICK_WARMUP} warm-up and {QUICK_REPS} timed runs")
    ap.add_argument("--nheads-k", type=int, nargs="+", default=NHEADS_K, help=f"default {NHEADS_K}")
    ap.add_argument("--seqlens-q", type=int, nargs="+", default=SEQLENS_Q, help=f"default {SEQLENS_Q}")
    ap.add_argument("--batches", type=int, nargs="+", help=f"default {BATCHES}; overrides --quick's")
    ap.add_argument("--cache-lens", type=int, nargs="+", help=f"default {CACHE_LENS}; overrides --quick's")
    ap.add_argument("--pages", type=int, nargs="+", default=PAGE_SIZES,
                    help=f"page sizes, {DENSE} for the dense cache (default {PAGE_SIZES})")
    ap.add_argument("--page-order", choices=["random", "sequential", "local", "sorted"], default="random",
                    help="block tables: a random permutation of the pool (default), the pool in order (the dense "
                         "cache's addresses, isolating the cost of the paged code path), random within each 2 MiB "
                         "(the address translations' reach, apart from the scatter), or random with each sequence's "
                         "pages ascending")
    ap.add_argument("--cache-layout", choices=["bshd", "bhsd"], default="bshd",
                    help="flashattn's dense cache: (batch, seqlen, nheads_k, hdim) as FlashAttention's (default), or "
                         "a (batch, nheads_k, seqlen, hdim) tensor as SDPA's, passed transposed")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to benchmark")
        return 0
    import flashattn

    os.makedirs(args.out, exist_ok=True)
    batches = args.batches or (QUICK_BATCHES if args.quick else BATCHES)
    cache_lens = args.cache_lens or (QUICK_CACHE_LENS if args.quick else CACHE_LENS)
    warmup, reps = (QUICK_WARMUP, QUICK_REPS) if args.quick else (WARMUP, REPS)
    native_gqa = sdpa_has_enable_gqa()
    if not native_gqa:
        print(f"note: torch {torch.__version__} has no enable_gqa: SDPA gets K/V repeated to {NHEADS_Q} heads "
              "(copied outside the timing)")

    copy_tbs = copy_bandwidth_tbs()
    print(f"device copy: {copy_tbs:.3f} TB/s (read + write, {COPY_BYTES // GIB} GiB, median of {COPY_REPS})")
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=DEVICE)
    print(table_header(), flush=True)
    records, skipped, seen_errors = [], [], set()
    for nheads_k in args.nheads_k:
        for seqlen_q in args.seqlens_q:
            for batch in batches:
                for cache_len in cache_lens:
                    need = cache_bytes(batch, nheads_k, cache_len)
                    if need > MEMORY_BUDGET_BYTES:
                        skipped.append({"nheads_k": nheads_k, "seqlen_q": seqlen_q, "batch": batch,
                                        "cache_len": cache_len, "cache_bytes": need})
                        print(f"skipped hk={nheads_k} sq={seqlen_q} batch={batch} cache={length_label(cache_len)}: "
                              f"K+V caches {need / GIB:.1f} GiB over the {MEMORY_BUDGET_BYTES / GIB:g} GiB budget",
                              flush=True)
                        continue
                    shape_records = run_shape(nheads_k, seqlen_q, batch, cache_len, args.pages, native_gqa,
                                              copy_tbs, warmup, reps, flush, args.page_order,
                                              args.cache_layout)
                    for rec in shape_records:
                        print(table_row(rec), flush=True)
                        for line in new_errors(rec, seen_errors):
                            print(line, flush=True)
                    records += shape_records
                    torch.cuda.empty_cache()  # the next shape's caches may need the space in one piece

    summary = summarize(records)
    print_summary(summary)
    meta = {
        **run_environment(torch, flashattn),
        "dtype": "bfloat16", "head_dim": HEAD_DIM, "nheads_q": NHEADS_Q, "causal": True, "page_order": args.page_order,
        "cache_layout": args.cache_layout,
        "warmup": warmup, "repetitions": reps,
        "copy_bytes": COPY_BYTES, "copy_tbs": copy_tbs, "copy_note": "device-to-device tensor.copy_, read + write",
        "memory_budget_bytes": MEMORY_BUDGET_BYTES, "skipped": skipped,
        "bytes": "2 * batch * cache_len * nheads_k * head_dim * 2 (K and V once) + q + out",
        "timing": f"median of CUDA-event times of the attention call alone, a {L2_FLUSH_BYTES // MIB} MiB L2 flush "
                  f"({'a read' if FLUSH_BY_READING else 'a memset'}) before each, every call queued behind a GPU "
                  "sleep (the host's time not measured)",
        "sdpa": "contiguous (batch, heads, seqlen, hdim) cache, timed once per shape (paged records repeat it); "
                + ("enable_gqa=True" if native_gqa else f"K/V repeat_interleave'd to {NHEADS_Q} heads untimed")
                + "; seqlen_q 1: is_causal=False; seqlen_q > 1: bottom-right causal boolean attn_mask",
        "sdpa_gqa": "enable_gqa" if native_gqa else "repeat_interleave",
    }
    json_path = os.path.join(args.out, JSON_NAME)
    with open(json_path, "w") as fh:
        json.dump({"meta": meta, "summary": summary, "records": records}, fh, indent=1)
    print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
