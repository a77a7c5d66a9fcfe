#!/usr/bin/env python3
"""The SM clock and board power while a decode call runs back to back: flashattn's kv-cache kernel (with any
environment variants) against PyTorch SDPA's cuDNN backend on the contiguous cache, interleaved.

Why: a memory-bound call still slows when the SM clock drops (the timeline's blocks ran at 1.80 GHz with their
products and 1.98 without), so how hard a kernel's arithmetic leans on the clock is part of its speed.

    python3 bench/kvc_clocks.py --shapes 16:8:4096 64:8:1024 --env allrows=FLASHATTN_KVC_ALL_ROWS:1

Each (shape, variant) runs for --seconds of calls replayed from a CUDA graph (no L2 flush: the caches are larger
than L2), while nvidia-smi samples clocks.sm, power.draw and the clock event reasons every 20 ms; printed: the
samples' median clock and power, and the call's time from CUDA events over the window. Rounds interleave variants.
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ab import env_set  # noqa: E402
from decode_splits import parse_shape, parse_variants  # noqa: E402

CALLS_PER_GRAPH = 50


class Sampler:
    """nvidia-smi in the background, one line (monotonic time, clock MHz, watts, reasons) a sample."""

    def __init__(self, period_ms):
        self.samples = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.active",
             "--format=csv,noheader,nounits", f"-lms={period_ms}"],
            stdout=subprocess.PIPE, text=True, bufsize=1)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [x.strip() for x in line.split(",")]
            try:
                self.samples.append((time.monotonic(), float(parts[0]), float(parts[1]), parts[2]))
            except (ValueError, IndexError):
                pass

    def between(self, t0, t1):
        return [s for s in self.samples if t0 <= s[0] <= t1]

    def stop(self):
        self.proc.terminate()


def graphed(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(CALLS_PER_GRAPH):
            fn()
    return g


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", required=True, help="batch:nheads_k:cache_len[:page]")
    ap.add_argument("--env", action="append", default=[], help="LABEL=VAR:VALUE[,VAR:VALUE]")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from flashattn import flash_attn_with_kvcache
    import bench_decode as bd

    variants = parse_variants(args.env, first_label="flashattn")
    sampler = Sampler(20)
    time.sleep(0.5)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for text in args.shapes:
        batch, nheads_k, cache_len, page = parse_shape(text)
        q = torch.randn(batch, 1, bd.NHEADS_Q, bd.HEAD_DIM, device="cuda", dtype=bd.DTYPE, generator=gen)
        k = torch.randn(batch, cache_len, nheads_k, bd.HEAD_DIM, device="cuda", dtype=bd.DTYPE, generator=gen)
        v = torch.randn_like(k)
        table = None
        if page:
            k, v, table = bd.paged_cache(k, v, page, gen)
        lengths = torch.full((batch,), cache_len, dtype=torch.int32, device="cuda")
        graphs = {}
        for label, env in variants:
            with env_set(env):
                graphs[label] = graphed(lambda: flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths,
                                                                        block_table=table, causal=True))
        if not page:  # cuDNN on the same dense cache, as SDPA lays it out
            kt, vt = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
            qt = q.transpose(1, 2).contiguous()

            def cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
            graphs["cudnn"] = graphed(cudnn)
        results = {label: [] for label in graphs}
        for _ in range(args.rounds):
            for label, g in graphs.items():
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                t0 = time.monotonic()
                start.record()
                replays = 0
                while time.monotonic() - t0 < args.seconds:
                    g.replay()
                    replays += 1
                    if replays % 20 == 0:
                        torch.cuda.synchronize()
                stop.record()
                torch.cuda.synchronize()
                t1 = time.monotonic()
                us = start.elapsed_time(stop) * 1e3 / (replays * CALLS_PER_GRAPH)
                window = sampler.between(t0 + 0.3 * (t1 - t0), t1)  # past the ramp
                clocks = [s[1] for s in window] or [float("nan")]
                watts = [s[2] for s in window] or [float("nan")]
                reasons = sorted({s[3] for s in window})
                results[label].append((us, statistics.median(clocks), statistics.median(watts), reasons))
        for label, rows in results.items():
            print(f"{text:>14s} {label:>10s}: " + " | ".join(
                f"{us:7.1f} us {mhz:5.0f} MHz {w:4.0f} W {','.join(r)}" for us, mhz, w, r in rows), flush=True)
    sampler.stop()


if __name__ == "__main__":
    main()
