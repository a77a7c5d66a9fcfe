#!/usr/bin/env python3
"""KV-cache decode: flashattn's flash_attn_with_kvcache against PyTorch SDPA (cuDNN and flash backends) on the
contiguous cache, in one process, reporting achieved bandwidth against the device copy bandwidth measured in the
same run.

Shapes (the decode anchors' of ../shared/anchors): bf16, nheads_q 32 with nheads_k 8 or 32, head dim 128, seqlen_q
1 or 4, batch 1..64, cache length 1k..64k, dense caches and paged ones (page 16, 64, 256, blocks in random order),
every sequence's cache full to the length, nothing appended, causal. GB/s = (bytes of K and V read once + q + out)
/ median time, CUDA events after warm-up. flashattn runs with num_splits=0 (its heuristic) and num_splits=1 (no
split), to show what split-KV buys.

    python3 bench/bench_decode.py --out $OUT [--quick]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

from bench_sweep import median_ms

DTYPE_BYTES = 2  # bf16
HEAD_DIM = 128
NHEADS_Q = 32
NHEADS_K = (8, 32)
SEQLENS_Q = (1, 4)
BATCHES = (1, 4, 16, 64)
CACHE_LENS = (1024, 4096, 16384, 65536)
PAGE_SIZES = (None, 16, 64, 256)  # None: dense
QUICK = {"batches": (1, 64), "cache_lens": (4096, 16384), "nheads_k": (8,), "seqlens_q": (1,), "pages": (None, 256)}
MEMORY_BUDGET_BYTES = 40 << 30  # the K and V caches of one configuration
COPY_BYTES = 2 << 30            # the device copy that sets the bandwidth ceiling
WARMUP, REPS = 5, 30
GIGA = 1e9
US_PER_MS = 1000.0


def copy_bandwidth_gbs(torch):
    """Device-to-device copy bandwidth, counting the bytes read and written."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), WARMUP, REPS)
    return 2 * COPY_BYTES / (ms / US_PER_MS) / GIGA


def traffic_bytes(batch, seqlen_q, nheads_k, cache_len):
    kv = 2 * batch * cache_len * nheads_k * HEAD_DIM * DTYPE_BYTES
    q_and_out = 2 * batch * seqlen_q * NHEADS_Q * HEAD_DIM * DTYPE_BYTES
    return kv + q_and_out


def run_config(torch, batch, seqlen_q, nheads_k, cache_len, page):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashattn import flash_attn_with_kvcache

    gen = torch.Generator(device="cuda").manual_seed(batch * 7 + cache_len)
    randn = lambda *shape: torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    q = randn(batch, seqlen_q, NHEADS_Q, HEAD_DIM)
    k_dense, v_dense = randn(batch, cache_len, nheads_k, HEAD_DIM), randn(batch, cache_len, nheads_k, HEAD_DIM)
    lengths = torch.full((batch,), cache_len, dtype=torch.int32, device="cuda")
    block_table = None
    k_cache, v_cache = k_dense, v_dense
    if page:
        pages_per_seq = -(-cache_len // page)
        order = torch.randperm(batch * pages_per_seq, device="cuda", generator=gen)
        block_table = order.view(batch, pages_per_seq).to(torch.int32)
        # Physical block order[i] holds logical page i (sequence i // pages_per_seq): the same data as the dense cache.
        k_cache = torch.empty(batch * pages_per_seq, page, nheads_k, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        v_cache = torch.empty_like(k_cache)
        k_cache[order] = k_dense.view(batch * pages_per_seq, page, nheads_k, HEAD_DIM)
        v_cache[order] = v_dense.view(batch * pages_per_seq, page, nheads_k, HEAD_DIM)

    row = {"batch": batch, "seqlen_q": seqlen_q, "nheads_q": NHEADS_Q, "nheads_k": nheads_k, "head_dim": HEAD_DIM,
           "cache_len": cache_len, "page_size": page, "bytes": traffic_bytes(batch, seqlen_q, nheads_k, cache_len)}

    def flashattn_call(splits):
        return lambda: flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=block_table,
                                               causal=True, num_splits=splits)

    for name, splits in (("flashattn", 0), ("flashattn_nosplit", 1)):
        try:
            row[f"{name}_us"] = median_ms(flashattn_call(splits), WARMUP, REPS) * US_PER_MS
        except RuntimeError as err:
            row[f"{name}_us"] = None
            row[f"{name}_error"] = str(err).splitlines()[0]

    if page is None:  # SDPA reads the contiguous cache: once per cache length, not per page size
        qt = q.transpose(1, 2)
        kt, vt = k_dense.transpose(1, 2), v_dense.transpose(1, 2)
        # Bottom-right causal for seqlen_q > 1: query i sees keys j <= i + cache_len - seqlen_q (built outside timing).
        mask = None
        if seqlen_q > 1:
            rows = torch.arange(seqlen_q, device="cuda").view(-1, 1)
            mask = torch.arange(cache_len, device="cuda").view(1, -1) <= rows + cache_len - seqlen_q
        for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    call = lambda: F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True)
                    row[f"{name}_us"] = median_ms(call, WARMUP, REPS) * US_PER_MS
            except (RuntimeError, TypeError) as err:
                row[f"{name}_us"] = None
                row[f"{name}_error"] = str(err).splitlines()[0]
    for key in [k for k in row if k.endswith("_us")]:
        us = row[key]
        row[key.replace("_us", "_gbs")] = row["bytes"] / (us / 1e6) / GIGA if us else None
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out", help="folder for bench_decode.json")
    ap.add_argument("--quick", action="store_true",
                    help="a subset: batch 1 and 64, cache 4k and 16k, dense and page 256")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to benchmark")
        return 0
    import flashattn

    os.makedirs(args.out, exist_ok=True)
    batches = QUICK["batches"] if args.quick else BATCHES
    cache_lens = QUICK["cache_lens"] if args.quick else CACHE_LENS
    heads_k = QUICK["nheads_k"] if args.quick else NHEADS_K
    seqlens_q = QUICK["seqlens_q"] if args.quick else SEQLENS_Q
    pages = QUICK["pages"] if args.quick else PAGE_SIZES

    copy_gbs = copy_bandwidth_gbs(torch)
    print(f"device copy: {copy_gbs:.0f} GB/s (read + write)")
    print(f"{'b':>3} {'sq':>2} {'hk':>3} {'cache':>6} {'page':>5} | {'ours us':>8} {'GB/s':>6} {'of copy':>7} "
          f"{'nosplit':>8} | {'cuDNN us':>8} {'flash us':>8} {'x cuDNN':>7}")
    rows = []
    for hk in heads_k:
        for sq in seqlens_q:
            for b in batches:
                for n in cache_lens:
                    if 2 * b * n * hk * HEAD_DIM * DTYPE_BYTES > MEMORY_BUDGET_BYTES:
                        print(f"skipped b={b} cache={n} hk={hk}: caches over the "
                              f"{MEMORY_BUDGET_BYTES >> 30} GiB budget")
                        continue
                    dense_row = None
                    for page in pages:
                        r = run_config(torch, b, sq, hk, n, page)
                        if page is None:
                            dense_row = r
                        elif dense_row:  # SDPA was timed on the dense cache of the same shape
                            for key in ("sdpa_cudnn_us", "sdpa_flash_us", "sdpa_cudnn_gbs", "sdpa_flash_gbs"):
                                r[key] = dense_row.get(key)
                        r["flashattn_of_copy"] = r["flashattn_gbs"] / copy_gbs if r.get("flashattn_gbs") else None
                        rows.append(r)
                        fmt = lambda x, w=8, d=1: f"{x:{w}.{d}f}" if x else f"{'-':>{w}}"
                        ratio = (r["sdpa_cudnn_us"] / r["flashattn_us"]
                                 if r.get("sdpa_cudnn_us") and r.get("flashattn_us") else None)
                        print(f"{b:3d} {sq:2d} {hk:3d} {n:6d} {str(page or 'dense'):>5} | {fmt(r['flashattn_us'])} "
                              f"{fmt(r['flashattn_gbs'], 6, 0)} {fmt(r['flashattn_of_copy'], 7, 2)} "
                              f"{fmt(r['flashattn_nosplit_us'])} | {fmt(r.get('sdpa_cudnn_us'))} "
                              f"{fmt(r.get('sdpa_flash_us'))} {fmt(ratio, 7, 2)}", flush=True)
    try:
        commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or None
    except OSError:
        commit = None
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "flashattn": flashattn.__version__,
        "commit": os.environ.get("FLASHATTN_COMMIT", commit),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "copy_gbs": copy_gbs,
        "warmup": WARMUP, "repetitions": REPS,
    }
    with open(os.path.join(args.out, "bench_decode.json"), "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
