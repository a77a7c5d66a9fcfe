#!/usr/bin/env python3
"""How much the last, partly filled wave of work tiles costs the one-tile Hopper forward (bench/NOTES_sm90.md v18):
bf16, head dim 128, seqlen 8192, non-causal, batch 1, with the head count varied so that the 128-row tiles
(64 a head) fill 15.03 to 16.48 waves of the GPU's SMs. If the tail matters, TFLOP/s follows the last wave's fill
(heads 33: 2112 tiles, 16.0 waves on 132 SMs, the best case). CUDA-event medians of back-to-back calls, the head
counts interleaved over rounds.

    python3 bench/wave_tail.py [--heads 31 32 33 34] [--rounds 7]
"""
import argparse
import statistics

import torch

from flashattn import flash_attn_func


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, nargs="+", default=[31, 32, 33, 34])
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    d, s = 128, args.seqlen
    inputs = {h: [torch.randn(1, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)] for h in args.heads}
    times = {h: [] for h in args.heads}
    for h in args.heads:  # warm-up
        for _ in range(3):
            flash_attn_func(*inputs[h])
    torch.cuda.synchronize()
    for _ in range(args.rounds):
        for h in args.heads:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(args.calls):
                flash_attn_func(*inputs[h])
            b.record()
            b.synchronize()
            times[h].append(a.elapsed_time(b) / args.calls)
    print(f"{sms} SMs, head dim {d}, seqlen {s}, non-causal, batch 1")
    best = None
    rows = []
    for h in args.heads:
        ms = statistics.median(times[h])
        tiles = h * ((s + 127) // 128)
        tflops = 4 * s * s * h * d / (ms * 1e-3) / 1e12
        rows.append((h, tiles, tiles / sms, ms, tflops))
        best = max(best or 0, tflops)
    for h, tiles, waves, ms, tflops in rows:
        fill = waves / -(-tiles // sms)
        print(f"heads {h:3d}: {tiles} tiles, {waves:.2f} waves (busy share {fill:.3f}), {ms:.3f} ms, "
              f"{tflops:.1f} TFLOP/s ({tflops / best:.3f} of the best)")


if __name__ == "__main__":
    main()
