#!/usr/bin/env python3
"""The backward's time two ways, for flashattn and PyTorch SDPA's flash (FA2) and cuDNN backends, in one process:

  subtracted  (forward + backward) - forward, as bench/bench_sweep.py reports it;
  direct      the backward call alone: flashattn's C ABI call; for SDPA, autograd.grad on a graph kept from one
              forward (retain_graph), as FlashAttention's own benchmark times its backward.

All calls of a shape are sampled in the same interleaved rounds (bench_sweep.interleaved_samples). Prints TFLOP/s by
FlashAttention's formula (backward 2.5x forward) and the ratio flashattn / peer under each method.

    python3 bench/bwd_timing.py --lib build/libflashattn.so --shape 256:16384:0 --shape 64:512:0
"""
import argparse
import contextlib
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_sweep import Flashattn, flashattn_calls, flops_forward, interleaved_samples, parse_shape, sweep_inputs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shape", action="append", required=True, help="hdim:seqlen:causal(0|1)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json")
    args = ap.parse_args()
    fa = Flashattn(args.lib)
    rows = []
    print(f"{'hdim':>4} {'seqlen':>6} {'causal':>6} | {'method':>10} | {'flashattn':>9} {'fa2':>9} {'cudnn':>9} | "
          f"{'x fa2':>6} {'x cudnn':>7}")
    for spec in args.shape:
        d, s, causal = parse_shape(spec)
        b, h, q, k, v, dout = sweep_inputs(d, s)
        ours_f, ours_b = flashattn_calls(fa, q, k, v, dout, causal)
        ours_f()
        none = contextlib.nullcontext
        fns = {"flashattn:f": (none, ours_f), "flashattn:fb": (none, lambda: (ours_f(), ours_b())),
               "flashattn:b": (none, ours_b)}
        qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
        dot = dout.transpose(1, 2)
        for name, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            ctx = lambda backend=backend: sdpa_kernel(backend)
            sf = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            with ctx():
                o = sf()  # the graph the direct backward runs on, again and again (its lambda keeps it)
            fns[f"{name}:f"] = (ctx, sf)
            fns[f"{name}:fb"] = (ctx, lambda sf=sf: torch.autograd.grad(sf(), (qt, kt, vt), dot))
            fns[f"{name}:b"] = (ctx, lambda o=o: torch.autograd.grad(o, (qt, kt, vt), dot, retain_graph=True))
        samples = interleaved_samples(fns, warmup=3, rounds=args.rounds)
        t = {n: (x if isinstance(x, Exception) else statistics.median(x)) for n, x in samples.items()}
        f = 2.5 * flops_forward(b, s, h, d, causal)
        row = {"hdim": d, "seqlen": s, "causal": causal}
        for method in ("subtracted", "direct"):
            tf = {}
            for impl in ("flashattn", "fa2", "cudnn"):
                try:
                    ms = t[f"{impl}:b"] if method == "direct" else t[f"{impl}:fb"] - t[f"{impl}:f"]
                    tf[impl] = f / (ms * 1e-3) / 1e12
                except TypeError:  # a backend that refused the shape
                    tf[impl] = float("nan")
                row[f"{impl}_{method}"] = tf[impl]
            print(f"{d:>4} {s:>6} {str(causal):>6} | {method:>10} | {tf['flashattn']:9.1f} {tf['fa2']:9.1f} "
                  f"{tf['cudnn']:9.1f} | {tf['flashattn'] / tf['fa2']:6.3f} {tf['flashattn'] / tf['cudnn']:7.3f}")
        rows.append(row)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
