#!/usr/bin/env python3
"""Where a call's GPU time goes: the time of each kernel one call launches, for flashattn (C ABI) and PyTorch SDPA's
flash (FA2) and cuDNN backends, on the standard sweep's shapes (bf16, batch * seqlen = 16384, hidden 2048).

A sweep gives one time a call; this lists the kernels inside it (the backward's pre-pass, main kernel and post-pass;
a peer's own helper kernels) from the profiler's kernel records, averaged over the calls. It is a breakdown, not a
speed figure: the profiler adds gaps between launches, so the sum is not the sweep's time.

    python3 bench/kernel_times.py --lib build/libflashattn.so --shape 64:512:0 --shape 256:16384:0 [--direction bwd]
        [--python]   (with the package importable: its flash_attn_func too)
"""
import argparse
import collections

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from bench_sweep import Flashattn, batch_ms, flashattn_calls, parse_shape, sweep_inputs

CALLS = 20


def kernel_us(fn, calls=CALLS, api=None):
    """Average microseconds a call of each kernel `fn` launches, by kernel name (first 70 characters). With a dict
    `api`, the host's CUDA runtime and driver calls go into it too: name -> (calls, host microseconds) a call."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if api is not None else [])
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total = collections.defaultdict(float)
    host = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total[e.name[:70]] += e.device_time_total
        elif api is not None and e.name.startswith("cu"):
            host[e.name][0] += 1
            host[e.name][1] += e.cpu_time_total
    if api is not None:
        api.update({k: (n / calls, us / calls) for k, (n, us) in host.items()})
    return {k: v / calls for k, v in sorted(total.items(), key=lambda kv: -kv[1])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shape", action="append", required=True, help="hdim:seqlen:causal(0|1)")
    ap.add_argument("--direction", choices=["fwd", "bwd"], default="bwd")
    ap.add_argument("--host-calls", action="store_true",
                    help="also list the CUDA runtime/driver calls the host makes a call (a synchronisation shows here)")
    ap.add_argument("--python", action="store_true",
                    help="also flashattn's Python API (flash_attn_func; the backward by autograd on a kept graph)")
    args = ap.parse_args()
    fa = Flashattn(args.lib)
    for spec in args.shape:
        d, s, causal = parse_shape(spec)
        b, h, q, k, v, dout = sweep_inputs(d, s)
        ours_f, ours_b = flashattn_calls(fa, q, k, v, dout, causal)
        ours_f()
        ours = ours_f if args.direction == "fwd" else ours_b
        qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
        dot = dout.transpose(1, 2)
        print(f"== hd{d} seqlen {s} {'causal' if causal else 'non-causal'} (batch {b}, {h} heads), {args.direction}, "
              f"us a call by kernel")

        def sdpa(backend):
            def call():
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                    if args.direction == "bwd":
                        torch.autograd.grad(o, (qt, kt, vt), dot)
            return call

        impls = [("flashattn", ours), ("fa2", sdpa(SDPBackend.FLASH_ATTENTION)),
                 ("cudnn", sdpa(SDPBackend.CUDNN_ATTENTION))]
        if args.python:
            from flashattn import flash_attn_func
            qp, kp, vp = (x.detach().requires_grad_() for x in (q, k, v))
            if args.direction == "fwd":
                impls.append(("flashattn (Python)", lambda: flash_attn_func(qp, kp, vp, causal=causal)))
            else:
                op = flash_attn_func(qp, kp, vp, causal=causal)
                impls.append(("flashattn (Python)",
                              lambda: torch.autograd.grad(op, (qp, kp, vp), dout, retain_graph=True)))
        for name, fn in impls:
            api = {} if args.host_calls else None
            try:
                times = kernel_us(fn, api=api)
            except RuntimeError as e:
                print(f"  {name}: {str(e).splitlines()[0]}")
                continue
            events_us = 1000 * batch_ms(fn, CALLS)
            print(f"  {name}: {sum(times.values()):9.1f} us of kernels, {events_us:9.1f} us a call between events"
                  + (" (the forward's kernels included)" if name in ("fa2", "cudnn") and args.direction == "bwd" else ""))
            for k_name, us in times.items():
                print(f"    {us:9.1f}  {k_name}")
            for k_name, (n, us) in sorted((api or {}).items(), key=lambda kv: -kv[1][1]):
                print(f"    host: {n:5.1f} x {k_name} ({us:.1f} us)")


if __name__ == "__main__":
    main()
