#!/usr/bin/env python3
"""A/B of flashattn variants in one process, interleaved, on the standard sweep's shapes.

Sweeps run one after another drift with the GPU's clocks and temperature by several percent, more than the effects
being compared. Here every variant runs on the same inputs in rounds (A B C, then B C A, ...), each round timing a
batch of launches between two CUDA events, and a variant's time is the median over rounds. A variant is a library
(a build of another tree, copied to its own file) and environment variables, which the library reads at each launch:

    python3 bench/bench_ab.py --variant base=build/libflashattn.so \
        --variant wide=build/libflashattn.so:FLASHATTN_SM90_BLOCK_N=wide --hdims 128 256 --causal both

cuDNN (PyTorch SDPA) runs in the same rounds as an anchor (--anchor fa2 takes its flash backend, none neither).
Prints, per shape, TFLOP/s (FlashAttention's formula) of each variant and its ratio to the first; writes JSON with
--json.
"""
import argparse
import contextlib
import ctypes
import json
import math
import os
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_sweep import HIDDEN, TOKENS, Flashattn, flops_forward, interleaved_samples


def parse_variant(text):
    """name=path[:VAR=value[,VAR=value...]]"""
    name, rest = text.split("=", 1)
    path, _, env = rest.partition(":")
    pairs = dict(kv.split("=", 1) for kv in env.split(",") if kv)
    return name, path, pairs


@contextlib.contextmanager
def env_set(env):
    """The environment variables of `env` set for the duration (the library reads them at each launch)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", required=True, help="name=lib.so[:VAR=value,...]; first is the base")
    ap.add_argument("--hdims", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--seqlens", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--causal", choices=["no", "yes", "both"], default="both")
    ap.add_argument("--direction", choices=["fwd", "bwd"], default="fwd", help="bwd: the backward call alone")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--ms-per-round", type=float, default=20.0, help="about this much GPU time per variant a round")
    ap.add_argument("--anchor", choices=["cudnn", "fa2", "none"], default="cudnn",
                    help="the PyTorch SDPA backend timed in the same rounds")
    ap.add_argument("--json")
    args = ap.parse_args()

    libs = {}
    variants = []
    for text in args.variant:
        name, path, env = parse_variant(text)
        if path not in libs:
            libs[path] = Flashattn(path)
        variants.append((name, libs[path], env))
    causals = {"no": [False], "yes": [True], "both": [False, True]}[args.causal]

    rows = []
    anchor = None if args.anchor == "none" else args.anchor
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}.get(args.anchor)
    names = [v[0] for v in variants] + ([anchor] if anchor else [])
    print(f"{'hdim':>4} {'seqlen':>6} {'causal':>6} | " + " ".join(f"{n:>14}" for n in names))
    for d in args.hdims:
        for s in args.seqlens:
            for causal in causals:
                b, h = TOKENS // s, HIDDEN // d
                gen = torch.Generator(device="cuda").manual_seed(s * 1000 + d)
                q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                                 for _ in range(4))
                f = flops_forward(b, s, h, d, causal) * (2.5 if args.direction == "bwd" else 1.0)
                out, lse = torch.empty_like(q), torch.empty(b, h, s, device="cuda", dtype=torch.float32)
                dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                calls = []
                keep = []
                for name, fa, env in variants:
                    fwd = fa.make_fwd(q, k, v, out, lse, causal)
                    run_f = lambda fa=fa, fwd=fwd: fa.check(fa.lib.flashattn_forward(ctypes.byref(fwd)), "fwd")
                    if args.direction == "fwd":
                        fn = run_f
                    else:
                        with env_set(env):
                            run_f()  # out and lse for the backward
                        bwd, ws = fa.make_bwd(dout, q, k, v, out, lse, dq, dk, dv, causal)
                        keep.append((bwd, ws))
                        fn = lambda fa=fa, bwd=bwd: fa.check(fa.lib.flashattn_backward(ctypes.byref(bwd)), "bwd")
                    calls.append((name, fn, env))
                if anchor:
                    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
                    dot = dout.transpose(1, 2)

                    def anchor_fwd(qt=qt, kt=kt, vt=vt, causal=causal):
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

                    def anchor_fwd_bwd(qt=qt, kt=kt, vt=vt, dot=dot):
                        torch.autograd.grad(anchor_fwd(), (qt, kt, vt), dot)

                    if args.direction == "fwd":
                        calls.append((anchor, anchor_fwd, {}))
                    else:  # its backward alone: forward + backward, less the forward (timed in the same rounds)
                        calls.append((anchor + "+fwd", anchor_fwd_bwd, {}))
                        calls.append((anchor + ":fwd", anchor_fwd, {}))
                # Launches a round: about ms_per_round of GPU time, from one timed call after warm-up.
                times = interleaved_samples({name: (lambda env=env: env_set(env), fn) for name, fn, env in calls},
                                            warmup=3, rounds=args.rounds, ms_per_sample=args.ms_per_round)
                for x in times.values():
                    if isinstance(x, Exception):  # every variant and the anchor must run the shape
                        raise x
                row = {"hdim": d, "seqlen": s, "causal": causal, "batch": b, "nheads": h, "direction": args.direction}
                for name in times:
                    t = statistics.median(times[name])
                    row[f"{name}_ms"] = t
                    row[f"{name}_tflops"] = f / (t * 1e-3) / 1e12
                    row[f"{name}_spread"] = (max(times[name]) - min(times[name])) / t
                if anchor and args.direction == "bwd":
                    t = row[f"{anchor}+fwd_ms"] - row[f"{anchor}:fwd_ms"]
                    row[f"{anchor}_ms"], row[f"{anchor}_tflops"] = t, f / (t * 1e-3) / 1e12
                rows.append(row)
                base = row[f"{variants[0][0]}_tflops"]
                cells = []
                for n in names:
                    x = row.get(f"{n}_tflops")
                    cells.append(f"{x:7.1f} {x / base:5.3f}" if x else f"{'-':>14}")
                print(f"{d:4d} {s:6d} {str(causal):>6} | " + " ".join(f"{c:>14}" for c in cells), flush=True)

    def geomean(xs):
        xs = [x for x in xs if x]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

    summary = {}
    for n in names[1:]:
        summary[f"{n}_vs_{names[0]}"] = geomean([r.get(f"{n}_tflops") and r[f"{n}_tflops"] / r[f"{names[0]}_tflops"]
                                                 for r in rows])
    if anchor:
        for n in names[:-1]:
            summary[f"{n}_vs_{anchor}"] = geomean([r[f"{n}_tflops"] / r[f"{anchor}_tflops"] for r in rows])
    print("geometric means: " + "  ".join(f"{k} {v:.3f}" for k, v in summary.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "summary": summary, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
