#!/usr/bin/env python3
"""The host's time per call: what an eager caller (no CUDA graph) pays on the CPU before the GPU sees the work.

For a small decode the kernels take ~13 us; if the Python layer and the C++ host path take longer than that, an
eager decode loop runs at the host's pace and the GPU waits. Measured as the wall time of `--calls` back-to-back
calls (no sync between them) over the count, with the GPU held busy first by a long sleep kernel so that the launch
queue never makes the host wait, for flashattn's flash_attn_with_kvcache (dense and paged), flash_attn_func, and
SDPA's cuDNN backend on the same shapes. Then a cProfile of flash_attn_with_kvcache, its top entries by own time.
"decode sweep iteration" is one timed iteration of bench/bench_decode.py (the L2 flush's memset, two events and the
dense call): where it takes the host longer than the GPU's flush and kernels, a long run of them drains the launch
queue and the eager medians there read the host's pace.

    python3 bench/host_overhead.py [--calls 400] [--profile] [--cache-lens 1024 4096 16384]
"""
import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch
import torch.nn.functional as F

BATCH, NHEADS_Q, NHEADS_K, HEAD_DIM, CACHE_LEN, PAGE = 1, 32, 8, 128, 1024, 16
L2_FLUSH_BYTES = 256 * 1024 * 1024  # bench/bench_decode.py's
SLEEP_CYCLES = 200_000_000  # ~0.1 s of GPU time: longer than any timed run of calls


def host_us_per_call(fn, calls, rounds=5):
    """Median over rounds of (wall time of `calls` calls queued behind a sleeping GPU) / calls, in microseconds."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(rounds):
        torch.cuda._sleep(SLEEP_CYCLES)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_call)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--profile", action="store_true", help="also cProfile flash_attn_with_kvcache")
    ap.add_argument("--cache-lens", type=int, nargs="+", default=[CACHE_LEN], help=f"default {CACHE_LEN}")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("host_overhead: no CUDA GPU visible; nothing to measure")
        return
    for cache_len in args.cache_lens:
        measure(cache_len, args)


def measure(cache_len, args):
    from flashattn import flash_attn_func, flash_attn_with_kvcache

    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(BATCH, 1, NHEADS_Q, HEAD_DIM, device=dev, dtype=dt, generator=g)
    k_cache = torch.randn(BATCH, cache_len, NHEADS_K, HEAD_DIM, device=dev, dtype=dt, generator=g)
    v_cache = torch.randn_like(k_cache)
    lengths = torch.full((BATCH,), cache_len, dtype=torch.int32, device=dev)
    blocks = BATCH * cache_len // PAGE
    k_pool = k_cache.reshape(blocks, PAGE, NHEADS_K, HEAD_DIM)
    v_pool = v_cache.reshape(blocks, PAGE, NHEADS_K, HEAD_DIM)
    table = torch.arange(blocks, dtype=torch.int32, device=dev).reshape(BATCH, -1)
    qs = q.transpose(1, 2).contiguous()
    ks, vs = k_cache.transpose(1, 2).contiguous(), v_cache.transpose(1, 2).contiguous()
    qf = torch.randn(BATCH, 128, NHEADS_Q, HEAD_DIM, device=dev, dtype=dt, generator=g)
    kf = torch.randn(BATCH, 128, NHEADS_K, HEAD_DIM, device=dev, dtype=dt, generator=g)
    vf = torch.randn_like(kf)

    def kvc_dense():
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, causal=True)

    def kvc_paged():
        flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens=lengths, block_table=table, causal=True)

    def kvc_dense_nosplit():
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, causal=True, num_splits=1)

    def kvc_dense_tensor_scratch():
        # The split path's scratch handed over as a tensor (through its Python __dlpack__), as before 4675e21.
        from flashattn import _ops
        capsule_route = _ops._allocator_for
        _ops._allocator_for = lambda t: lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device=t.device)
        try:
            kvc_dense()
        finally:
            _ops._allocator_for = capsule_route

    def fwd_small():
        flash_attn_func(qf, kf, vf, causal=True)

    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=dev)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def sweep_iteration():
        flush.zero_()
        start.record()
        kvc_dense()
        stop.record()

    def sdpa_cudnn():
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)

    print(f"host us per call ({args.calls} calls queued behind a sleeping GPU, median of 5 rounds); bf16, batch "
          f"{BATCH}, {NHEADS_Q} query heads on {NHEADS_K} kv heads, head dim {HEAD_DIM}, cache {cache_len}")
    for name, fn in (("flash_attn_with_kvcache dense", kvc_dense),
                     ("flash_attn_with_kvcache dense num_splits=1", kvc_dense_nosplit),
                     ("flash_attn_with_kvcache dense, scratch a tensor", kvc_dense_tensor_scratch),
                     ("flash_attn_with_kvcache dense (again)", kvc_dense),
                     (f"flash_attn_with_kvcache paged {PAGE}", kvc_paged),
                     ("flash_attn_func 128 x 128 causal", fwd_small),
                     ("decode sweep iteration (flush, events, dense)", sweep_iteration),
                     ("SDPA cuDNN (sdpa_kernel context included)", sdpa_cudnn)):
        try:
            print(f"  {name:45s} {host_us_per_call(fn, args.calls):8.1f}")
        except RuntimeError as err:
            print(f"  {name:45s} failed: {str(err).splitlines()[0]}")
    # The GPU's side of a sweep iteration: the flush's memset alone (the kernels' own times are in the decode sweep).
    flush_ms = []
    for _ in range(20):
        start.record()
        flush.zero_()
        stop.record()
        torch.cuda.synchronize()
        flush_ms.append(start.elapsed_time(stop))
    print(f"  {'GPU time of the flush memset alone':45s} {statistics.median(flush_ms) * 1e3:8.1f}")
    if args.profile:
        prof = cProfile.Profile()
        torch.cuda._sleep(SLEEP_CYCLES)
        prof.enable()
        for _ in range(args.calls):
            kvc_dense()
        prof.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
        print(text.getvalue())


if __name__ == "__main__":
    main()
