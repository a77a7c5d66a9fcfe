#!/usr/bin/env python3
"""How much the last, partly filled wave of work tiles costs the one-tile Hopper forward (bench/NOTES_sm90.md v18):
bf16, head dim 128, seqlen 8192, non-causal, batch 1, with the head count varied so that the 128-row tiles
(64 a head) fill 15.03 to 16.48 waves of the GPU's SMs. If the tail matters, TFLOP/s follows the last wave's fill
(heads 33: 2112 tiles, 16.0 waves on 132 SMs, the best case). CUDA-event medians of back-to-back calls, the head
counts interleaved over rounds. With --split-ab every head count runs twice a round, with the last wave's split as the
library chooses it and with FLASHATTN_SM90_TAIL_SPLIT=0 (bench/NOTES_sm90.md v19), interleaved.

    python3 bench/wave_tail.py [--heads 31 32 33 34] [--rounds 7] [--split-ab]
"""
import argparse
import os
import statistics

import torch

from flashattn import flash_attn_func


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, nargs="+", default=[31, 32, 33, 34])
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--split-ab", action="store_true", help="also time each head count with the split off")
    args = ap.parse_args()
    modes = ["split", "nosplit"] if args.split_ab else ["default"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    d, s = 128, args.seqlen
    inputs = {h: [torch.randn(1, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)] for h in args.heads}
    times = {(h, m): [] for h in args.heads for m in modes}

    def set_mode(mode):  # the library reads the variable at every call
        if mode == "nosplit":
            os.environ["FLASHATTN_SM90_TAIL_SPLIT"] = "0"
        else:
            os.environ.pop("FLASHATTN_SM90_TAIL_SPLIT", None)

    for h in args.heads:  # warm-up
        for m in modes:
            set_mode(m)
            for _ in range(3):
                flash_attn_func(*inputs[h])
    torch.cuda.synchronize()
    for _ in range(args.rounds):
        for h in args.heads:
            for m in modes:
                set_mode(m)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(args.calls):
                    flash_attn_func(*inputs[h])
                b.record()
                b.synchronize()
                times[(h, m)].append(a.elapsed_time(b) / args.calls)
    set_mode("default")
    print(f"{sms} SMs, head dim {d}, seqlen {s}, non-causal, batch 1")
    best = None
    rows = []
    for h in args.heads:
        for m in modes:
            ms = statistics.median(times[(h, m)])
            tiles = h * ((s + 127) // 128)
            tflops = 4 * s * s * h * d / (ms * 1e-3) / 1e12
            rows.append((h, m, tiles, tiles / sms, ms, tflops))
            best = max(best or 0, tflops)
    for h, m, tiles, waves, ms, tflops in rows:
        fill = waves / -(-tiles // sms)
        print(f"heads {h:3d} {m:8s}: {tiles} tiles, {waves:.2f} waves (busy share {fill:.3f}), {ms:.3f} ms, "
              f"{tflops:.1f} TFLOP/s ({tflops / best:.3f} of the best)")


if __name__ == "__main__":
    main()
