#!/usr/bin/env python3
"""Where the resident-block kv-cache patches hang (bench/patches/README.md): one decode call (batch 40, 32 query heads
on 8 kv heads, head dim 128, 300-key caches, ragged lengths) in a subprocess per setting, each printing, flushed, when
its inputs are ready, when the call returns and when the device has finished, and killed after --timeout seconds.
A hang inside a kernel shows "returned" without "synced"; one on the host shows neither.

    PYTHONPATH=<site with a patched build> python3 bench/kv_resident_diag.py

Settings: the usual 3-D grid (FLASHATTN_KVC_PERSISTENT=0), the resident grid as the patch sizes it, and the resident
grid forced to FLASHATTN_KVC_RESIDENT_BLOCKS blocks (a debug override the patch under test must read), with and
without CUDA_LAUNCH_BLOCKING.
"""
import argparse
import os
import subprocess
import sys

CALL = r"""
import torch
from flashattn import flash_attn_with_kvcache
torch.manual_seed(0)
b, hq, hk, d, L = 40, 32, 8, 128, 300
q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
k_cache = torch.randn(b, L, hk, d, device="cuda", dtype=torch.bfloat16)
v_cache = torch.randn(b, L, hk, d, device="cuda", dtype=torch.bfloat16)
lengths = torch.randint(1, L, (b,), device="cuda", dtype=torch.int32)
torch.cuda.synchronize(); print("inputs ready", flush=True)
out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, causal=True)
print("returned", flush=True)
torch.cuda.synchronize(); print("synced", flush=True)
"""

SETTINGS = [
    ("3-D grid", {"FLASHATTN_KVC_PERSISTENT": "0"}),
    ("resident grid", {}),
    ("resident, 320 blocks", {"FLASHATTN_KVC_RESIDENT_BLOCKS": "320"}),
    ("resident, 320 blocks, blocking launches", {"FLASHATTN_KVC_RESIDENT_BLOCKS": "320", "CUDA_LAUNCH_BLOCKING": "1"}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds a setting may take (default 30)")
    args = ap.parse_args()
    for label, extra in SETTINGS:
        env = dict(os.environ, **extra)
        try:
            r = subprocess.run([sys.executable, "-u", "-c", CALL], capture_output=True, text=True,
                               timeout=args.timeout, env=env)
            print(f"{label}: rc {r.returncode}, printed {r.stdout.split()}, stderr {r.stderr.strip().splitlines()[-2:]}")
        except subprocess.TimeoutExpired as e:
            printed = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            print(f"{label}: killed after {args.timeout:.0f} s, printed {printed.strip().splitlines()}")


if __name__ == "__main__":
    main()
