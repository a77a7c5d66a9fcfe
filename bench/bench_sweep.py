#!/usr/bin/env python3
"""FlashAttention's standard sweep: flashattn (through its C ABI, ctypes) against PyTorch SDPA's flash (FA2) and
cuDNN backends, in one process, on the same inputs.

bf16, batch * seqlen = 16384, hidden 2048 (nheads = 2048 / head dim), head dims 64/128/256, seqlen 512..16384,
causal off/on. TFLOP/s by FlashAttention's formula: forward 4*b*s*s*h*d (halved when causal), backward 2.5x
forward; times are medians of CUDA-event timings of batches of back-to-back calls after warm-up, the
implementations sampled in interleaved rounds; backward = (forward + backward) - forward.

    python3 bench/bench_sweep.py --lib build/libflashattn.so --json out/bench.json [--quick]
"""
import argparse
import contextlib
import ctypes
import datetime
import json
import math
import os
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOKENS = 16384
HIDDEN = 2048
MAX_DIMS = 4
DTYPE_CODES = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2, torch.float64: 3, torch.int32: 4}
CUDA_DEVICE = 1


# ----- the C ABI (include/flashattn/flashattn_c.h) --------------------------------------------------------------------
class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("device_type", ctypes.c_int32),
                ("device_index", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("stride", ctypes.c_int64 * MAX_DIMS)]


class Options(ctypes.Structure):
    _fields_ = [("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int32), ("window_left", ctypes.c_int32),
                ("window_right", ctypes.c_int32), ("softcap", ctypes.c_float), ("alibi_slopes", Tensor),
                ("dropout_p", ctypes.c_float), ("seed", ctypes.c_uint64), ("offset", ctypes.c_uint64),
                ("deterministic", ctypes.c_int32)]


class Context(ctypes.Structure):
    _fields_ = [("stream", ctypes.c_void_p), ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t)]


class FwdArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t)] + \
               [(n, Tensor) for n in ("q", "k", "v", "out", "softmax_lse", "attn_probs")] + \
               [("options", Options), ("ctx", Context)]


class BwdArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t)] + \
               [(n, Tensor) for n in ("dout", "q", "k", "v", "out", "softmax_lse", "dq", "dk", "dv", "softmax_d")] + \
               [("options", Options), ("ctx", Context)]


def view(t):
    """A flashattn_tensor over a torch tensor (no copy)."""
    v = Tensor()
    v.data = t.data_ptr()
    v.dtype = DTYPE_CODES[t.dtype]
    v.device_type = CUDA_DEVICE if t.is_cuda else 0
    v.device_index = (t.device.index or 0) if t.is_cuda else 0
    v.ndim = t.dim()
    for i, (s, st) in enumerate(zip(t.shape, t.stride())):
        v.shape[i] = s
        v.stride[i] = st
    return v


class Flashattn:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        for name, argtype in (("flashattn_forward", FwdArgs), ("flashattn_backward", BwdArgs)):
            fn = getattr(self.lib, name)
            fn.argtypes = [ctypes.POINTER(argtype)]
            fn.restype = ctypes.c_int32
        self.lib.flashattn_backward_workspace_size.argtypes = [ctypes.POINTER(BwdArgs), ctypes.POINTER(ctypes.c_size_t)]
        self.lib.flashattn_backward_workspace_size.restype = ctypes.c_int32
        self.lib.flashattn_forward_workspace_size.argtypes = [ctypes.POINTER(FwdArgs), ctypes.POINTER(ctypes.c_size_t)]
        self.lib.flashattn_forward_workspace_size.restype = ctypes.c_int32
        # The _init functions take the struct's size as this mirror lays it out (the C header's macros pass sizeof).
        self.lib.flashattn_fwd_args_init_sized.argtypes = [ctypes.POINTER(FwdArgs), ctypes.c_size_t]
        self.lib.flashattn_bwd_args_init_sized.argtypes = [ctypes.POINTER(BwdArgs), ctypes.c_size_t]
        self.lib.flashattn_fwd_args_init_sized.restype = ctypes.c_int32
        self.lib.flashattn_bwd_args_init_sized.restype = ctypes.c_int32
        self.lib.flashattn_last_error.restype = ctypes.c_char_p
        self.lib.flashattn_version.restype = ctypes.c_char_p

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: status {status}: {self.lib.flashattn_last_error().decode()}")

    def make_fwd(self, q, k, v, out, lse, causal):
        a = FwdArgs()
        self.check(self.lib.flashattn_fwd_args_init_sized(ctypes.byref(a), ctypes.sizeof(a)), "fwd args")
        a.q, a.k, a.v, a.out, a.softmax_lse = view(q), view(k), view(v), view(out), view(lse)
        a.options.causal = int(causal)
        a.ctx.stream = torch.cuda.current_stream().cuda_stream
        # The workspace the forward asks for (the Hopper forward's last-wave split), kept alive with the arguments.
        size = ctypes.c_size_t(0)
        self.check(self.lib.flashattn_forward_workspace_size(ctypes.byref(a), ctypes.byref(size)), "fwd workspace")
        if size.value:
            a._workspace = torch.empty(size.value, dtype=torch.uint8, device="cuda")
            a.ctx.workspace = a._workspace.data_ptr()
            a.ctx.workspace_bytes = size.value
        return a

    def make_bwd(self, dout, q, k, v, out, lse, dq, dk, dv, causal):
        a = BwdArgs()
        self.check(self.lib.flashattn_bwd_args_init_sized(ctypes.byref(a), ctypes.sizeof(a)), "bwd args")
        a.dout, a.q, a.k, a.v, a.out, a.softmax_lse = view(dout), view(q), view(k), view(v), view(out), view(lse)
        a.dq, a.dk, a.dv = view(dq), view(dk), view(dv)
        a.options.causal = int(causal)
        a.ctx.stream = torch.cuda.current_stream().cuda_stream
        size = ctypes.c_size_t(0)
        self.check(self.lib.flashattn_backward_workspace_size(ctypes.byref(a), ctypes.byref(size)), "bwd workspace")
        workspace = torch.empty(max(size.value, 1), dtype=torch.uint8, device="cuda")
        a.ctx.workspace = workspace.data_ptr()
        a.ctx.workspace_bytes = size.value
        return a, workspace


# GPU time a timed sample covers: a sample is a batch of back-to-back launches between two events (as FlashAttention's
# benchmarks time repeated calls), so that a short kernel is not timed together with the host's time to launch it.
MS_PER_SAMPLE = 5.0


def batch_ms(fn, launches):
    """Milliseconds a call, over `launches` back-to-back calls between two CUDA events."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(launches):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / launches


def interleaved_samples(fns, warmup, rounds, ms_per_sample=MS_PER_SAMPLE):
    """Timed samples (ms a call) of each callable in `fns` (name -> (context, callable): the callable runs inside a
    fresh `context()`, entered before the start event is recorded). Each sample times a batch of back-to-back calls
    (about ms_per_sample of GPU time, from one call timed alone after warm-up). The callables are sampled in rounds,
    one sample each a round, in an order that rotates from round to round, so that clock and temperature drift over
    the run weigh on every implementation alike (timed one after another, a peer's figure moved by up to 7% between
    runs). A callable that raises RuntimeError in its warm-up (a backend that cannot take the shape) is left out and
    its error returned instead of a list of samples."""

    def sample(ctx, fn, launches):
        with ctx():
            return batch_ms(fn, launches)

    results, live = {}, {}
    for name, (ctx, fn) in fns.items():
        try:
            with ctx():
                for _ in range(warmup):
                    fn()
            launches = max(1, int(ms_per_sample / max(sample(ctx, fn, 1), 1e-3)))
            live[name] = (ctx, fn, launches)
        except RuntimeError as e:
            results[name] = e
    names = list(live)
    for name in names:
        results[name] = []
    for r in range(rounds):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            results[name].append(sample(*live[name]))
    return results


def median_ms(fns, warmup, reps):
    """The median of each callable's interleaved_samples (or its warm-up's RuntimeError)."""
    return {name: x if isinstance(x, Exception) else statistics.median(x)
            for name, x in interleaved_samples(fns, warmup, reps).items()}


def flops_forward(b, s, h, d, causal):
    f = 4.0 * b * s * s * h * d
    return f / 2 if causal else f


def parse_shape(spec):
    """(head dim, seqlen, causal) from "hdim:seqlen:causal" (causal 0 or 1), the --shape arguments of the tools."""
    d, s, c = (int(x) for x in spec.split(":"))
    return d, s, bool(c)


def sweep_inputs(d, s):
    """The sweep's inputs at head dim d and seqlen s: (batch, nheads, q, k, v, dout), bf16 (batch, seqlen, nheads,
    head dim), random from a generator seeded by the shape."""
    b, h = TOKENS // s, HIDDEN // d
    gen = torch.Generator(device="cuda").manual_seed(s * 1000 + d)
    q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    return b, h, q, k, v, dout


def flashattn_calls(fa, q, k, v, dout, causal):
    """flashattn's forward and backward on these inputs through the C ABI, as two callables; the outputs, gradients
    and workspace are allocated here and kept alive by the callables. The backward reads the out and LSE that the
    last forward wrote."""
    b, s, h, _ = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    fwd = fa.make_fwd(q, k, v, out, lse, causal)
    bwd, workspace = fa.make_bwd(dout, q, k, v, out, lse, dq, dk, dv, causal)
    keep = (out, lse, dq, dk, dv, workspace)  # the C ABI structs hold their addresses only
    forward = lambda keep=keep: fa.check(fa.lib.flashattn_forward(ctypes.byref(fwd)), "fwd")
    backward = lambda keep=keep: fa.check(fa.lib.flashattn_backward(ctypes.byref(bwd)), "bwd")
    return forward, backward


def run_config(fa, d, s, causal, warmup, reps, backward=True):
    b, h, q, k, v, dout = sweep_inputs(d, s)
    f = flops_forward(b, s, h, d, causal)
    row = {"hdim": d, "seqlen": s, "causal": causal, "batch": b, "nheads": h}

    # flashattn, through the C ABI
    ours_f, ours_b = flashattn_calls(fa, q, k, v, dout, causal)
    ours_fb = lambda: (ours_f(), ours_b())
    fwd_fns = {"flashattn": (contextlib.nullcontext, ours_f)}
    fb_fns = {"flashattn": (contextlib.nullcontext, ours_fb)}

    # PyTorch SDPA backends on the same inputs ((b, h, s, d) views, no copies), each under its backend choice
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    dot = dout.transpose(1, 2)
    sf = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    sfb = lambda: torch.autograd.grad(sf(), (qt, kt, vt), dot)
    for name, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        ctx = lambda backend=backend: sdpa_kernel(backend)
        fwd_fns[name] = (ctx, sf)
        fb_fns[name] = (ctx, sfb)

    t_f = median_ms(fwd_fns, warmup, reps)
    t_fb = median_ms(fb_fns, warmup, reps) if backward else {}
    for name in fwd_fns:
        ok_f = not isinstance(t_f[name], Exception)
        ok_fb = backward and ok_f and not isinstance(t_fb[name], Exception)
        row[f"{name}_fwd"] = f / (t_f[name] * 1e-3) / 1e12 if ok_f else None
        row[f"{name}_bwd"] = 2.5 * f / ((t_fb[name] - t_f[name]) * 1e-3) / 1e12 if ok_fb else None
        if name == "flashattn":
            if not ok_f:
                raise t_f[name]
        elif not ok_f or (backward and not ok_fb):  # backend unavailable for this shape
            err = t_f[name] if not ok_f else t_fb[name]
            row[f"{name}_error"] = str(err).splitlines()[0]
    return row


def geomean(xs):
    # A peer's failed or glitched timing (a backward time below its forward's gives a negative rate) is left out.
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to libflashattn.so")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--quick", action="store_true", help="seqlens 1024 and 8192 only, fewer repetitions")
    ap.add_argument("--seqlens", type=int, nargs="+", help="these seqlens (batch = 16384 / seqlen) instead")
    ap.add_argument("--hdims", type=int, nargs="*", default=[64, 128, 256])
    ap.add_argument("--forward-only", action="store_true", help="time the forwards alone (comparing forward variants)")
    args = ap.parse_args()

    fa = Flashattn(args.lib)
    seqlens = args.seqlens or ([1024, 8192] if args.quick else [512, 1024, 2048, 4096, 8192, 16384])
    warmup, reps = (3, 10) if args.quick else (5, 30)
    rows = []
    header = f"{'hdim':>4} {'seqlen':>6} {'causal':>6} | {'ours fwd':>8} {'FA2 fwd':>8} {'cuDNN':>8} {'x FA2':>6} | " \
             f"{'ours bwd':>8} {'FA2 bwd':>8} {'cuDNN':>8} {'x FA2':>6}"
    print(header)
    for d in args.hdims:
        for s in seqlens:
            for causal in (False, True):
                r = run_config(fa, d, s, causal, warmup, reps, backward=not args.forward_only)
                rows.append(r)
                fmt = lambda x: f"{x:8.1f}" if x else f"{'-':>8}"
                ratio = lambda a, b: f"{a / b:6.2f}" if a and b else f"{'-':>6}"
                print(f"{d:4d} {s:6d} {str(causal):>6} | {fmt(r['flashattn_fwd'])} {fmt(r['fa2_fwd'])} "
                      f"{fmt(r['cudnn_fwd'])} {ratio(r['flashattn_fwd'], r['fa2_fwd'])} | {fmt(r['flashattn_bwd'])} "
                      f"{fmt(r['fa2_bwd'])} {fmt(r['cudnn_bwd'])} {ratio(r['flashattn_bwd'], r['fa2_bwd'])}", flush=True)

    summary = {}
    for direction in ("fwd", "bwd"):
        for peer in ("fa2", "cudnn"):
            ratios = [r[f"flashattn_{direction}"] / r[f"{peer}_{direction}"] for r in rows
                      if (r.get(f"{peer}_{direction}") or 0) > 0 and (r.get(f"flashattn_{direction}") or 0) > 0]
            summary[f"{direction}_vs_{peer}_geomean"] = geomean(ratios)
            summary[f"{direction}_vs_{peer}_min"] = min(ratios) if ratios else None
    print("geometric mean, ours / FA2:   forward %.3f (min %.3f)   backward %.3f (min %.3f)" % (
        summary["fwd_vs_fa2_geomean"], summary["fwd_vs_fa2_min"] or float("nan"),
        summary["bwd_vs_fa2_geomean"], summary["bwd_vs_fa2_min"] or float("nan")))
    print("geometric mean, ours / cuDNN: forward %.3f   backward %.3f" % (
        summary["fwd_vs_cudnn_geomean"], summary["bwd_vs_cudnn_geomean"]))

    if args.json:
        try:
            commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "HEAD"],
                                    capture_output=True, text=True).stdout.strip() or None
        except OSError:
            commit = None
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "flashattn": fa.lib.flashattn_version().decode(),
            "commit": os.environ.get("FLASHATTN_COMMIT", commit),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "dtype": "bfloat16", "tokens": TOKENS, "hidden": HIDDEN, "warmup": warmup, "repetitions": reps,
            "ms_per_sample": MS_PER_SAMPLE, "timing": "interleaved rounds of batched launches",
        }
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "summary": summary, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
