#!/usr/bin/env python3
"""Is the GPU in its usual state? A bf16 8192^3 matrix product (TFLOP/s) and a 2 GiB device copy (TB/s, read +
written), medians of CUDA-event timings, with the SM clock, power and temperature nvidia-smi reads after them. On the
lent H100 the product runs at about 770-800 TFLOP/s and the copy at about 3.0 TB/s; a run far below that says the
machine, not the code, is slow, and the A/B or sweep beside it is not to be read.

    python3 scripts/gpu_sanity.py [--min-tflops 600]   (exit status 3 below the minimum)
"""
import argparse
import subprocess
import sys

import torch


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min-tflops", type=float, default=0.0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU")
        return 0
    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    tflops = 2 * n ** 3 / (median_ms(lambda: x @ y) * 1e-3) / 1e12
    src = torch.empty(2 ** 30, device="cuda", dtype=torch.int16)
    dst = torch.empty_like(src)
    tbs = 2 * src.numel() * 2 / (median_ms(lambda: dst.copy_(src)) * 1e-3) / 1e12
    smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    print(f"gpu sanity: bf16 {n}^3 product {tflops:.0f} TFLOP/s, copy {tbs:.2f} TB/s; nvidia-smi after: {smi}")
    return 3 if tflops < args.min_tflops else 0


if __name__ == "__main__":
    sys.exit(main())
