#!/usr/bin/env python3
"""What the Hopper forward's speculative softmax costs where it fails: the forward on the sweep's random inputs against
the same inputs with keys that make about half of the rows' scores rise along the keys (each key row plus ramp x its
position), so that some row of every warpgroup grows its maximum by more than 2^8 at every key tile and every step
after a work tile's first is computed twice (src/kernels/sm90/fwd_kernel.cuh, row_exp2_sum_speculative).

    python3 bench/speculation_cost.py --lib build-gpu/libflashattn.so [--json out.json]

TFLOP/s by FlashAttention's formula, median of interleaved samples (bench_sweep.interleaved_samples).
"""
import argparse
import contextlib
import json

import torch

from bench_sweep import Flashattn, flashattn_calls, flops_forward, median_ms, sweep_inputs

SHAPES = [(64, 8192, False), (128, 2048, False), (128, 8192, False), (128, 8192, True), (256, 8192, False)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--ramp", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json")
    args = ap.parse_args()
    fa = Flashattn(args.lib)
    rows = []
    print(f"{'hdim':>4} {'seqlen':>6} {'causal':>6} | {'random':>8} {'rising':>8} {'ratio':>6}")
    for d, s, causal in SHAPES:
        b, h, q, k, v, dout = sweep_inputs(d, s)
        pos = torch.arange(s, device="cuda", dtype=torch.float32).view(1, s, 1, 1)
        k_rising = (k.float() + args.ramp * pos).to(k.dtype)
        fwd_random = flashattn_calls(fa, q, k, v, dout, causal)[0]
        fwd_rising = flashattn_calls(fa, q, k_rising, v, dout, causal)[0]
        nullctx = contextlib.nullcontext
        ms = median_ms({"random": (nullctx, fwd_random), "rising": (nullctx, fwd_rising)}, warmup=3, reps=args.rounds)
        f = flops_forward(b, s, h, d, causal)
        tf = {name: f / (t * 1e-3) / 1e12 for name, t in ms.items()}
        rows.append({"hdim": d, "seqlen": s, "causal": causal, **tf})
        print(f"{d:>4} {s:>6} {str(causal):>6} | {tf['random']:8.1f} {tf['rising']:8.1f} "
              f"{tf['rising'] / tf['random']:6.3f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"ramp": args.ramp, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
