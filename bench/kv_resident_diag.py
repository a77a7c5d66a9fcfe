#!/usr/bin/env python3
"""Where the resident-block kv-cache patches hang (bench/patches/README.md): one decode call (batch 40, 32 query heads
on 8 kv heads, head dim 128, 300-key caches, ragged lengths) in a subprocess per setting, each printing, flushed, when
its inputs are ready, when the call returns and when the device has finished, and killed after --timeout seconds.
A hang inside a kernel shows "returned" without "synced"; one on the host shows neither.

    PYTHONPATH=<site with a patched build> python3 bench/kv_resident_diag.py [--gdb BLOCKS]

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
import os, signal, time
done = torch.cuda.Event(); done.record()
deadline = time.time() + 10
while not done.query() and time.time() < deadline:
    time.sleep(0.05)
if not done.query() and os.environ.get("DIAG_TRAP"):
    print("still running after 10 s: stopping for the debugger", flush=True)
    os.kill(os.getpid(), signal.SIGTRAP)
torch.cuda.synchronize(); print("synced", flush=True)
"""

# Under cuda-gdb: where each warp of the hung kernel stands (the call above stops itself with SIGTRAP once the
# kernel has run 10 s).
GDB_COMMANDS = ["run", "info cuda kernels", "info cuda blocks", "cuda block 0 thread 0", "info cuda warps"] + \
    [c for blk in (0, 1, 200) for w in range(5) for c in (f"cuda block {blk} thread {32 * w}", "x/3i $pc-16")] + \
    ["kill"]

SETTINGS = [
    ("3-D grid", {"FLASHATTN_KVC_PERSISTENT": "0"}),
    ("resident grid", {}),
    ("resident, 320 blocks", {"FLASHATTN_KVC_RESIDENT_BLOCKS": "320"}),
    ("resident, 319 blocks (one runs two units)", {"FLASHATTN_KVC_RESIDENT_BLOCKS": "319"}),
    ("resident, 160 blocks (two units each)", {"FLASHATTN_KVC_RESIDENT_BLOCKS": "160"}),
    ("resident, 320 blocks, blocking launches", {"FLASHATTN_KVC_RESIDENT_BLOCKS": "320", "CUDA_LAUNCH_BLOCKING": "1"}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds a setting may take (default 30)")
    ap.add_argument("--gdb", type=int, default=-1, metavar="BLOCKS",
                    help="also run the resident grid under cuda-gdb and print each warp's place: BLOCKS blocks, "
                         "0 for the patch's own size")
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
    if args.gdb >= 0:
        env = dict(os.environ, DIAG_TRAP="1")
        if args.gdb > 0:
            env["FLASHATTN_KVC_RESIDENT_BLOCKS"] = str(args.gdb)
        cmd = ["cuda-gdb", "-batch"] + [a for c in GDB_COMMANDS for a in ("-ex", c)] + \
              ["--args", sys.executable, "-u", "-c", CALL]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 90, env=env)
            noise = ("[New Thread", "[Thread", "warning: Cuda Driver error")
            kept = [ln for ln in (r.stdout + r.stderr).splitlines() if not ln.startswith(noise)]
            print(f"cuda-gdb, resident, {args.gdb or 'default'} blocks:\n" + "\n".join(kept[-400:]))
        except subprocess.TimeoutExpired as e:
            printed = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            print("cuda-gdb timed out:\n" + printed[-8000:])


if __name__ == "__main__":
    main()
