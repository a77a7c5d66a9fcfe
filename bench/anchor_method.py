#!/usr/bin/env python3
"""The forward timed the way ../shared/anchors/README.md times its peers (FlashAttention-3, cuDNN): the median of
triton.testing.do_bench, which zeroes a 256 MB buffer (the L2 flush) before each timed call, so that calls do not
run back to back. bench/bench_sweep.py times batches of back-to-back calls instead (the GPU at its power limit the
whole time); this script answers "what does flashattn read by the anchors' own method", with SDPA's cuDNN and flash
backends timed the same way in the same run as the check that the method matches the anchors'.

bf16, batch * seqlen = 16384, hidden 2048 (nheads = 2048 / head dim), q/k/v random normal; TFLOP/s by
FlashAttention's formula, forward 4*b*s*s*h*d, halved when causal. flashattn through its Python API
(flash_attn_func, which allocates the forward's workspace).

    python3 bench/anchor_method.py [--hdims 128] [--seqlens 8192] [--causal 0 1] [--json out.json]
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOKENS, HIDDEN = 16384, 2048
TERA = 1e12
MS_PER_S = 1e3


def do_bench_median(fn):
    """triton.testing.do_bench(fn, return_mode="median") where triton is installed; else the same method written out:
    ~25 ms of warm-up, then ~100 ms of timed calls, each after zeroing a 256 MB buffer, one event pair a call."""
    try:
        from triton.testing import do_bench
        return do_bench(fn, return_mode="median"), "triton.testing.do_bench"
    except ImportError:
        pass
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    stop.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(stop) / 5, 1e-3)
    warmup, reps = max(1, int(25 / estimate)), max(1, int(100 / estimate))
    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in events:
        flush.zero_()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in events)
    return times[len(times) // 2], "do_bench's method (triton not installed)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hdims", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--seqlens", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--causal", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--json", help="write the records here")
    args = ap.parse_args()
    from flashattn import flash_attn_func

    records, method = [], None
    print(f"{'hdim':>4} {'seqlen':>6} {'causal':>6} | {'flashattn':>9} {'cuDNN':>7} {'SDPA-FA2':>8} | "
          "ours/cuDNN  (TFLOP/s)")
    for d in args.hdims:
        for s in args.seqlens:
            for causal in map(bool, args.causal):
                b, h = TOKENS // s, HIDDEN // d
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA's (b, h, s, d) views, as FlashAttention's
                flops = 4 * b * s * s * h * d / (2 if causal else 1)
                tflops = {}
                calls = {"flashattn": lambda: flash_attn_func(q, k, v, causal=causal)}
                for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_fa2", SDPBackend.FLASH_ATTENTION)):
                    calls[name] = lambda backend=backend: _sdpa(backend, qt, kt, vt, causal)
                for name, call in calls.items():
                    try:
                        ms, method = do_bench_median(call)
                        tflops[name] = flops / (ms / MS_PER_S) / TERA
                    except RuntimeError:
                        tflops[name] = None
                rec = {"hdim": d, "seqlen": s, "causal": causal, **{f"{n}_tflops": t for n, t in tflops.items()}}
                records.append(rec)
                fmt = lambda t, w, digits=1: f"{t:{w}.{digits}f}" if t else f"{'-':>{w}}"
                ratio = tflops["flashattn"] / tflops["cudnn"] if tflops["flashattn"] and tflops["cudnn"] else None
                print(f"{d:4d} {s:6d} {str(causal):>6} | {fmt(tflops['flashattn'], 9)} {fmt(tflops['cudnn'], 7)} "
                      f"{fmt(tflops['sdpa_fa2'], 8)} | {fmt(ratio, 6, 3)}", flush=True)
    print(f"timing: {method}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"method": method, "records": records}, f, indent=1)


def _sdpa(backend, q, k, v, causal):
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


if __name__ == "__main__":
    main()
