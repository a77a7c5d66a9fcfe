#!/usr/bin/env python3
"""The Hopper forward with ALiBi at head dim 64, long rows: the default schedule (two consumer warpgroups, whose
speculative softmax falls back to the exact one when ALiBi's rising bias keeps failing it) against specialised3
(three consumer warpgroups, speculating at every step), and both without ALiBi for reference. Standard slopes
(2^(-8 i / nheads), i = 1..nheads), the sweep's shapes and inputs (bench_sweep.sweep_inputs).

    python3 bench/alibi_schedule.py --lib build-gpu/libflashattn.so [--json out.json]
"""
import argparse
import contextlib
import ctypes
import json
import os

import torch

from bench_sweep import Flashattn, flashattn_calls, flops_forward, median_ms, sweep_inputs, view

SHAPES = [(64, 8192, True), (64, 8192, False), (64, 16384, True), (128, 8192, True)]


@contextlib.contextmanager
def schedule(name):
    old = os.environ.get("FLASHATTN_SM90_SCHEDULE")
    if name:
        os.environ["FLASHATTN_SM90_SCHEDULE"] = name
    else:
        os.environ.pop("FLASHATTN_SM90_SCHEDULE", None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("FLASHATTN_SM90_SCHEDULE", None)
        else:
            os.environ["FLASHATTN_SM90_SCHEDULE"] = old


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json")
    args = ap.parse_args()
    fa = Flashattn(args.lib)
    rows = []
    names = ["alibi default", "alibi specialised3", "plain default", "plain specialised3"]
    print(f"{'hdim':>4} {'seqlen':>6} {'causal':>6} | " + " ".join(f"{n:>18}" for n in names))
    for d, s, causal in SHAPES:
        b, h, q, k, v, dout = sweep_inputs(d, s)
        slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], device="cuda", dtype=torch.float32)
        plain = flashattn_calls(fa, q, k, v, dout, causal)[0]
        out = torch.empty_like(q)
        lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        fwd = fa.make_fwd(q, k, v, out, lse, causal)
        fwd.options.alibi_slopes = view(slopes)
        alibi = lambda fwd=fwd, keep=(out, lse, slopes): fa.check(fa.lib.flashattn_forward(ctypes.byref(fwd)), "fwd")
        fns = {"alibi default": (lambda: schedule(None), alibi),
               "alibi specialised3": (lambda: schedule("specialised3"), alibi)}
        if d == 64:
            fns["plain default"] = (lambda: schedule(None), plain)
            fns["plain specialised3"] = (lambda: schedule("specialised3"), plain)
        ms = median_ms(fns, warmup=3, reps=args.rounds)
        f = flops_forward(b, s, h, d, causal)
        tf = {n: (f / (t * 1e-3) / 1e12 if not isinstance(t, Exception) else None) for n, t in ms.items()}
        rows.append({"hdim": d, "seqlen": s, "causal": causal, **tf})
        print(f"{d:>4} {s:>6} {str(causal):>6} | " +
              " ".join(f"{tf[n]:18.1f}" if tf.get(n) else f"{'-':>18}" for n in names))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
