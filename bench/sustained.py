#!/usr/bin/env python3
"""Sustained runs of one backward shape with the GPU's SM clock and power sampled alongside.

Each implementation (flashattn's backward call; FA2's and cuDNN's backward through PyTorch SDPA on a kept graph) runs
back to back for --seconds, after an idle pause, while nvidia-smi samples the SM clock and the board power every
50 ms. Prints, per implementation, the time a call (CUDA events over the whole run), the same under the profiler's
kernel records (the kernels alone), and the median clock and power while it ran: whether a gap between two timing
methods comes from the clock the GPU holds under that kernel's load.

    python3 bench/sustained.py --lib build/libflashattn.so --shape 256:16384:0
"""
import argparse
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_sweep import Flashattn, flashattn_calls, parse_shape, sweep_inputs
from kernel_times import kernel_us

SAMPLE_MS = 50
IDLE_S = 1.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shape", required=True, help="hdim:seqlen:causal(0|1)")
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    fa = Flashattn(args.lib)
    d, s, causal = parse_shape(args.shape)
    _, _, q, k, v, dout = sweep_inputs(d, s)
    ours_f, ours_b = flashattn_calls(fa, q, k, v, dout, causal)
    ours_f()
    fns = {"flashattn": ours_b}
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    dot = dout.transpose(1, 2)
    for name, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        fns[name] = lambda o=o: torch.autograd.grad(o, (qt, kt, vt), dot, retain_graph=True)

    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            f"-lms={SAMPLE_MS}"], stdout=subprocess.PIPE, text=True)
    spans = {}
    times = {}
    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        one = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        calls = max(3, int(args.seconds / (time.perf_counter() - one)))
        time.sleep(IDLE_S)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.time()
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        spans[name] = (t0, time.time())
        times[name] = start.elapsed_time(stop) / calls
    time.sleep(2 * SAMPLE_MS / 1000)
    smi.terminate()
    samples = []
    for line in smi.communicate()[0].splitlines():
        try:
            ts, clk, pw = (x.strip() for x in line.split(","))
            t = time.mktime(time.strptime(ts.split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + ts.split(".")[1])
            samples.append((t, float(clk), float(pw)))
        except (ValueError, IndexError):
            continue
    print(f"hd{d} seqlen {s} {'causal' if causal else 'non-causal'}: backward, {args.seconds} s back to back each")
    print(f"{'':>10} {'ms a call':>10} {'kernels ms':>10} {'SM MHz':>7} {'watts':>6}")
    for name, fn in fns.items():
        t0, t1 = spans[name]
        inside = [x for x in samples if t0 <= x[0] <= t1]
        clk = statistics.median(x[1] for x in inside) if inside else float("nan")
        pw = statistics.median(x[2] for x in inside) if inside else float("nan")
        kern = sum(kernel_us(fn, calls=5).values()) / 1000
        print(f"{name:>10} {times[name]:10.3f} {kern:10.3f} {clk:7.0f} {pw:6.0f}")


if __name__ == "__main__":
    main()
