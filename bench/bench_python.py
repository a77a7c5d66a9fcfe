#!/usr/bin/env python3
"""flashattn's Python API (flash_attn_func, with autograd) against PyTorch SDPA's flash (FA2) and cuDNN backends, in
one process, on FlashAttention's standard sweep; writes a JSON and a PNG plot of TFLOP/s against seqlen.

The sweep and the timing are bench_sweep.py's: bf16, batch * seqlen = 16384, hidden 2048, head dims 64/128/256,
seqlen 512..16384, causal off/on; medians of CUDA-event timings after warm-up; forward 4*b*s*s*h*d FLOPs (halved when
causal), backward 2.5x forward, timed as (forward + backward through autograd) - forward. Unlike bench_sweep.py
(the C ABI, outputs preallocated) this measures what a PyTorch user gets: allocation through torch's caching
allocator, the custom operators and autograd included.

    python3 bench/bench_python.py --out $OUT [--quick] [--hdims 64 128] [--seqlens 1024 4096]
    python3 bench/bench_python.py --plot-only results.json --out DIR      # redraw the plot from a JSON
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

from bench_sweep import HIDDEN, TOKENS, flops_forward, geomean, median_ms

IMPLEMENTATIONS = ("flashattn", "fa2", "cudnn")
LABELS = {"flashattn": "flashattn", "fa2": "SDPA flash (FA2)", "cudnn": "SDPA cuDNN"}
SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
QUICK_SEQLENS = [1024, 8192]
TERA = 1e12
MS = 1e-3


def time_directions(forward, inputs, dout, warmup, reps):
    """(forward ms, backward ms): the backward is the forward-and-backward time less the forward's."""
    import torch

    t_fwd = median_ms(forward, warmup, reps)
    t_both = median_ms(lambda: torch.autograd.grad(forward(), inputs, dout), warmup, reps)
    return t_fwd, t_both - t_fwd


def run_config(d, s, causal, warmup, reps):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashattn import flash_attn_func

    b, h = TOKENS // s, HIDDEN // d
    gen = torch.Generator(device="cuda").manual_seed(s * 1000 + d)
    q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    flops = flops_forward(b, s, h, d, causal)
    records = []

    def record(impl, t_fwd, t_bwd, error=None):
        for direction, ms, work in (("fwd", t_fwd, flops), ("bwd", t_bwd, 2.5 * flops)):
            rec = {"hdim": d, "seqlen": s, "causal": causal, "batch": b, "nheads": h, "direction": direction,
                   "impl": impl, "ms": ms, "tflops": work / (ms * MS) / TERA if ms else None}
            if error:
                rec["error"] = error
            records.append(rec)

    record("flashattn", *time_directions(lambda: flash_attn_func(q, k, v, causal=causal), (q, k, v), dout,
                                         warmup, reps))
    qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))  # SDPA's (b, h, s, d) layout
    dot = dout.transpose(1, 2)
    for impl, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                record(impl, *time_directions(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                                              (qt, kt, vt), dot, warmup, reps))
        except RuntimeError as err:  # the backend does not take this shape
            record(impl, None, None, str(err).splitlines()[0])
    return records


def tflops_of(records, d, s, causal, direction, impl):
    for r in records:
        if (r["hdim"], r["seqlen"], r["causal"], r["direction"], r["impl"]) == (d, s, causal, direction, impl):
            return r["tflops"]
    return None


def summarize(records):
    summary = {}
    configs = {(r["hdim"], r["seqlen"], r["causal"]) for r in records}
    for direction in ("fwd", "bwd"):
        for peer in ("fa2", "cudnn"):
            ratios = []
            for d, s, causal in configs:
                ours = tflops_of(records, d, s, causal, direction, "flashattn")
                theirs = tflops_of(records, d, s, causal, direction, peer)
                if ours and theirs:
                    ratios.append(ours / theirs)
            summary[f"{direction}_vs_{peer}_geomean"] = geomean(ratios)
            summary[f"{direction}_vs_{peer}_min"] = min(ratios) if ratios else None
    return summary


def plot(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = result["records"]
    hdims = sorted({r["hdim"] for r in records})
    fig, axes = plt.subplots(2, len(hdims), figsize=(5 * len(hdims), 8), squeeze=False, sharex=True)
    colors = {"flashattn": "tab:red", "fa2": "tab:blue", "cudnn": "tab:green"}
    for row, direction in enumerate(("fwd", "bwd")):
        for col, d in enumerate(hdims):
            ax = axes[row][col]
            for impl in IMPLEMENTATIONS:
                for causal, style in ((False, "-"), (True, "--")):
                    points = sorted((r["seqlen"], r["tflops"]) for r in records
                                    if (r["hdim"], r["direction"], r["impl"], r["causal"]) == (d, direction, impl, causal)
                                    and r["tflops"])
                    if points:
                        ax.plot(*zip(*points), style, marker="o", color=colors[impl],
                                label=f"{LABELS[impl]}{', causal' if causal else ''}")
            ax.set_xscale("log", base=2)
            ax.set_title(f"{'forward' if direction == 'fwd' else 'backward'}, head dim {d}")
            ax.set_xlabel("seqlen (batch x seqlen = %d)" % TOKENS)
            ax.set_ylabel("TFLOP/s")
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    meta = result["meta"]
    fig.suptitle(f"bf16 attention on {meta.get('gpu')}: flashattn {meta.get('flashattn')} "
                 f"({(meta.get('commit') or '?')[:7]}), torch {meta.get('torch')}, {meta.get('date', '')[:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def commit_id():
    if os.environ.get("FLASHATTN_COMMIT"):
        return os.environ["FLASHATTN_COMMIT"]
    try:
        return subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "HEAD"],
                              capture_output=True, text=True).stdout.strip() or None
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out", help="folder for bench_python.json and bench_python.png")
    ap.add_argument("--quick", action="store_true", help=f"seqlens {QUICK_SEQLENS} only, fewer repetitions")
    ap.add_argument("--hdims", type=int, nargs="*", default=[64, 128, 256])
    ap.add_argument("--seqlens", type=int, nargs="*")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--plot-only", metavar="JSON", help="draw the plot of an earlier run's JSON and stop")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    png = os.path.join(args.out, "bench_python.png")

    if args.plot_only:
        with open(args.plot_only) as fh:
            plot(json.load(fh), png)
        print(f"wrote {png}")
        return 0

    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to benchmark")
        return 0
    import flashattn

    seqlens = args.seqlens or (QUICK_SEQLENS if args.quick else SEQLENS)
    warmup, reps = (3, 10) if args.quick else (5, 30)
    records = []
    print(f"{'hdim':>4} {'seqlen':>6} {'causal':>6} | {'ours fwd':>8} {'FA2 fwd':>8} {'cuDNN':>8} {'x FA2':>6} | "
          f"{'ours bwd':>8} {'FA2 bwd':>8} {'cuDNN':>8} {'x FA2':>6}")
    fmt = lambda x: f"{x:8.1f}" if x else f"{'-':>8}"
    ratio = lambda a, b: f"{a / b:6.2f}" if a and b else f"{'-':>6}"
    for d in args.hdims:
        for s in seqlens:
            for causal in (False, True):
                records += run_config(d, s, causal, warmup, reps)
                cells = []
                for direction in ("fwd", "bwd"):
                    t = {impl: tflops_of(records, d, s, causal, direction, impl) for impl in IMPLEMENTATIONS}
                    cells.append(f"{fmt(t['flashattn'])} {fmt(t['fa2'])} {fmt(t['cudnn'])} "
                                 f"{ratio(t['flashattn'], t['fa2'])}")
                print(f"{d:4d} {s:6d} {str(causal):>6} | {cells[0]} | {cells[1]}", flush=True)

    summary = summarize(records)
    print("geometric mean, ours / FA2:   forward %.3f   backward %.3f" % (
        summary["fwd_vs_fa2_geomean"], summary["bwd_vs_fa2_geomean"]))
    print("geometric mean, ours / cuDNN: forward %.3f   backward %.3f" % (
        summary["fwd_vs_cudnn_geomean"], summary["bwd_vs_cudnn_geomean"]))
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "flashattn": flashattn.__version__,
        "commit": commit_id(),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "dtype": "bfloat16", "tokens": TOKENS, "hidden": HIDDEN, "warmup": warmup, "repetitions": reps,
    }
    result = {"meta": meta, "summary": summary, "records": records}
    with open(os.path.join(args.out, "bench_python.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    if not args.no_plot:
        plot(result, png)
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
