#!/usr/bin/env python3
"""flashattn's Python API (flash_attn_func, through its torch custom ops and autograd) against PyTorch SDPA's flash
(FA2) and cuDNN backends, in one process, on the same inputs; prints a table, writes a JSON and a PNG plot.

FlashAttention's standard sweep, as bench/bench_sweep.py: bf16, batch * seqlen = 16384, hidden 2048 (nheads =
2048 / head dim), head dims 64/128/256, seqlen 512..16384, causal off/on. TFLOP/s by FlashAttention's formula:
forward 4*b*s*s*h*d (halved when causal), backward 2.5x forward. Times are medians of CUDA-event timings of batches
of back-to-back calls after warm-up (bench_sweep.median_ms), one implementation after another. The inputs require grad, so the forward is timed as in training (saving what the backward needs). The
backward is timed on its own: one forward builds the autograd graph, then
`torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)` is timed repeatedly on it (for all three
implementations alike). Unlike bench_sweep.py (the C ABI, outputs preallocated) this measures what a PyTorch user
gets: allocation through torch's caching allocator, the custom-operator dispatch and autograd included.

An implementation that refuses a shape (or runs out of memory) is recorded with null times and its error, and the
sweep goes on. Without a CUDA GPU the script says so and exits 0.

    python3 bench/bench_python.py --out $OUT [--quick] [--hdims 64 128] [--seqlens 1024 4096] [--no-plot]
    python3 bench/bench_python.py --plot-only $OUT/bench_python.json     # redraw the PNG beside that JSON

Writes $OUT/bench_python.json ({"meta", "summary", "records"}: one record per hdim, seqlen, causal, direction and
implementation, with ms and tflops) and $OUT/bench_python.png (rows forward/backward, columns head dim).
"""
import argparse
import contextlib
import datetime
import json
import math
import os
import shlex
import subprocess
import sys

# bench_sweep.py only defines things at import (its main() is guarded); it sits beside this file, on sys.path[0].
from bench_sweep import HIDDEN, TOKENS, flops_forward, geomean, median_ms

IMPLEMENTATIONS = ("flashattn", "fa2", "cudnn")
LABELS = {"flashattn": "flashattn", "fa2": "SDPA flash (FA2)", "cudnn": "SDPA cuDNN"}
COLORS = {"flashattn": "tab:red", "fa2": "tab:blue", "cudnn": "tab:green"}
DIRECTIONS = ("fwd", "bwd")
DIRECTION_NAMES = {"fwd": "forward", "bwd": "backward"}
CAUSAL_STYLES = ((False, "-"), (True, "--"))  # line style per causal setting in the plot

HDIMS = [64, 128, 256]
SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
QUICK_SEQLENS = [1024, 8192]
WARMUP, REPS = 5, 30
QUICK_WARMUP, QUICK_REPS = 3, 10

BWD_FLOPS_RATIO = 2.5  # FlashAttention's convention: the backward does 2.5x the forward's matrix work
TERA = 1e12
MS_PER_S = 1e3
SEED_PER_SEQLEN = 1000  # generator seed = seqlen * this + hdim: distinct inputs per shape, same across runs

JSON_NAME, PNG_NAME = "bench_python.json", "bench_python.png"
SUBPLOT_SIZE_IN = (5, 4)  # width, height of one subplot, inches
PLOT_DPI = 110


def first_line(err):
    return (str(err).splitlines() or [type(err).__name__])[0]


def single_median_ms(fn, warmup, reps):
    """bench_sweep.median_ms for one callable; its warm-up's RuntimeError is raised."""
    t = median_ms({"fn": (contextlib.nullcontext, fn)}, warmup, reps)["fn"]
    if isinstance(t, Exception):
        raise t
    return t


def measure(forward, inputs, dout, warmup, reps):
    """{direction: (median ms or None, error or None)} for one implementation's forward (a callable)."""
    import torch

    results = {}
    try:
        results["fwd"] = (single_median_ms(forward, warmup, reps), None)
    except RuntimeError as err:  # the shape refused (flashattn.Error and out-of-memory are RuntimeErrors too)
        results["fwd"] = (None, first_line(err))
    try:
        # One forward, then the backward alone, repeatedly on the same graph (retain_graph keeps its saved tensors).
        out = forward()
        results["bwd"] = (single_median_ms(lambda: torch.autograd.grad(out, inputs, dout, retain_graph=True), warmup,
                                           reps), None)
    except RuntimeError as err:
        results["bwd"] = (None, first_line(err))
    return results


def run_config(d, s, causal, warmup, reps):
    """The records of one shape: every implementation, both directions."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashattn import flash_attn_func

    b, h = max(1, TOKENS // s), HIDDEN // d
    gen = torch.Generator(device="cuda").manual_seed(s * SEED_PER_SEQLEN + d)
    q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    work = {"fwd": flops_forward(b, s, h, d, causal)}
    work["bwd"] = BWD_FLOPS_RATIO * work["fwd"]

    measured = {"flashattn": measure(lambda: flash_attn_func(q, k, v, causal=causal), (q, k, v), dout, warmup, reps)}
    # SDPA takes (b, h, s, d): transposed views of the same storage, the layout FA2 itself works in (no copies).
    qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
    dout_t = dout.transpose(1, 2)
    for impl, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        # Only the forward picks the backend; its backward is the one recorded in the graph.
        with sdpa_kernel(backend):
            measured[impl] = measure(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                                     (qt, kt, vt), dout_t, warmup, reps)

    records = []
    for impl in IMPLEMENTATIONS:
        for direction in DIRECTIONS:
            ms, error = measured[impl][direction]
            rec = {"hdim": d, "seqlen": s, "causal": causal, "batch": b, "nheads": h, "direction": direction,
                   "impl": impl, "ms": ms, "tflops": work[direction] / (ms / MS_PER_S) / TERA if ms else None}
            if error:
                rec["error"] = error
            records.append(rec)
    return records


def tflops_by_key(records):
    return {(r["hdim"], r["seqlen"], r["causal"], r["direction"], r["impl"]): r["tflops"] for r in records}


def summarize(records):
    """Geometric mean and minimum of flashattn's TFLOP/s over each peer's, per direction (None where no pair)."""
    tflops = tflops_by_key(records)
    configs = {(r["hdim"], r["seqlen"], r["causal"]) for r in records}
    summary = {}
    for direction in DIRECTIONS:
        for peer in ("fa2", "cudnn"):
            pairs = [(tflops.get((*c, direction, "flashattn")), tflops.get((*c, direction, peer))) for c in configs]
            ratios = [ours / theirs for ours, theirs in pairs if ours and theirs]
            mean = geomean(ratios)
            summary[f"{direction}_vs_{peer}_geomean"] = None if math.isnan(mean) else mean  # NaN is not JSON
            summary[f"{direction}_vs_{peer}_min"] = min(ratios) if ratios else None
    return summary


def print_header():
    print("TFLOP/s; 'x FA2' = flashattn / SDPA flash")
    print(f"{'hdim':>4} {'seqlen':>6} {'causal':>6} | {'ours fwd':>8} {'FA2 fwd':>8} {'cuDNN':>8} {'x FA2':>6} | "
          f"{'ours bwd':>8} {'FA2 bwd':>8} {'cuDNN':>8} {'x FA2':>6}")


def print_row(records):
    """One table line for the records of one shape."""
    d, s, causal = records[0]["hdim"], records[0]["seqlen"], records[0]["causal"]
    tflops = {(r["direction"], r["impl"]): r["tflops"] for r in records}
    fmt = lambda x: f"{x:8.1f}" if x else f"{'-':>8}"
    ratio = lambda a, b: f"{a / b:6.2f}" if a and b else f"{'-':>6}"
    cells = []
    for direction in DIRECTIONS:
        t = {impl: tflops[(direction, impl)] for impl in IMPLEMENTATIONS}
        cells.append(f"{fmt(t['flashattn'])} {fmt(t['fa2'])} {fmt(t['cudnn'])} {ratio(t['flashattn'], t['fa2'])}")
    print(f"{d:4d} {s:6d} {str(causal):>6} | {cells[0]} | {cells[1]}", flush=True)
    for r in records:
        if r.get("error") and r["direction"] == "fwd":  # one line per refusal (the backward then fails alike)
            print(f"    {r['impl']}: {r['error']}", flush=True)


def seqlen_label(s):
    return f"{s // 1024}k" if s >= 1024 and s % 1024 == 0 else str(s)


def line_label(impl, causal):
    return f"{LABELS[impl]}{', causal' if causal else ''}"


def plot(result, path):
    """TFLOP/s against seqlen: rows forward/backward, columns head dim; solid causal off, dashed causal on."""
    import matplotlib

    matplotlib.use("Agg")  # no display: render straight to the PNG
    import matplotlib.pyplot as plt

    records, meta = result["records"], result["meta"]
    hdims = sorted({r["hdim"] for r in records})
    seqlens = sorted({r["seqlen"] for r in records})
    width, height = SUBPLOT_SIZE_IN
    fig, axes = plt.subplots(len(DIRECTIONS), len(hdims), figsize=(width * len(hdims), height * len(DIRECTIONS)),
                             squeeze=False, sharex=True)
    for row, direction in enumerate(DIRECTIONS):
        for col, d in enumerate(hdims):
            ax = axes[row][col]
            for impl in IMPLEMENTATIONS:
                for causal, style in CAUSAL_STYLES:
                    line = (d, direction, impl, causal)
                    points = sorted((r["seqlen"], r["tflops"]) for r in records
                                    if (r["hdim"], r["direction"], r["impl"], r["causal"]) == line and r["tflops"])
                    if points:
                        ax.plot(*zip(*points), style, marker="o", color=COLORS[impl],
                                label=line_label(impl, causal))
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqlens, [seqlen_label(s) for s in seqlens])
            ax.set_ylim(bottom=0)
            ax.set_title(f"{DIRECTION_NAMES[direction]}, head dim {d}")
            if row == len(DIRECTIONS) - 1:  # the columns share their x axis: label it once, at the bottom
                ax.set_xlabel(f"seqlen (batch x seqlen = {meta.get('tokens', TOKENS)})")
            ax.set_ylabel("TFLOP/s")
            ax.grid(True, alpha=0.3)
    # One legend for the figure, gathered from every panel: an implementation may be missing from some of them.
    drawn = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            drawn.setdefault(label, handle)
    labels = [line_label(impl, causal) for impl in IMPLEMENTATIONS for causal, _ in CAUSAL_STYLES
              if line_label(impl, causal) in drawn]
    if labels:
        fig.legend([drawn[label] for label in labels], labels, loc="lower center", ncol=len(labels), fontsize=9)
    commit = (meta.get("commit") or "?")[:7]
    fig.suptitle(f"{meta.get('gpu')}: bf16 attention, flashattn {meta.get('flashattn')} ({commit}) vs torch "
                 f"{meta.get('torch')} SDPA, {(meta.get('date') or '')[:10]}")
    fig.tight_layout(rect=(0, 0.05, 1, 1))  # leave the bottom strip to the shared legend
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)


def commit_id():
    if os.environ.get("FLASHATTN_COMMIT"):
        return os.environ["FLASHATTN_COMMIT"]
    try:
        return subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "HEAD"],
                              capture_output=True, text=True).stdout.strip() or None
    except OSError:  # no git on this machine
        return None


def run_environment(torch, flashattn):
    """What every benchmark JSON records about its run: date, GPU, library versions, commit and command."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "flashattn": flashattn.__version__,
        "commit": commit_id(),
        "command": shlex.join([os.path.basename(sys.executable)] + sys.argv),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help=f"folder for {JSON_NAME} and {PNG_NAME} (default ./out; with --plot-only, the "
                                  "JSON's folder)")
    ap.add_argument("--quick", action="store_true",
                    help=f"seqlens {QUICK_SEQLENS} only, {QUICK_WARMUP} warm-up and {QUICK_REPS} timed runs")
    ap.add_argument("--hdims", type=int, nargs="+", default=HDIMS, help=f"head dims (default {HDIMS})")
    ap.add_argument("--seqlens", type=int, nargs="+", help=f"seqlens (default {SEQLENS}); overrides --quick's")
    ap.add_argument("--no-plot", action="store_true", help=f"write {JSON_NAME} only")
    ap.add_argument("--plot-only", metavar="JSON", help="draw the plot of an earlier run's JSON and stop")
    args = ap.parse_args()

    if args.plot_only:
        with open(args.plot_only) as fh:
            result = json.load(fh)
        out_dir = args.out or os.path.dirname(os.path.abspath(args.plot_only))
        os.makedirs(out_dir, exist_ok=True)
        png = os.path.join(out_dir, PNG_NAME)
        plot(result, png)
        print(f"wrote {png}")
        return 0

    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to benchmark")
        return 0
    import flashattn

    out_dir = args.out or "out"
    os.makedirs(out_dir, exist_ok=True)
    seqlens = args.seqlens or (QUICK_SEQLENS if args.quick else SEQLENS)
    warmup, reps = (QUICK_WARMUP, QUICK_REPS) if args.quick else (WARMUP, REPS)
    records = []
    print_header()
    for d in args.hdims:
        for s in seqlens:
            for causal in (False, True):
                config_records = run_config(d, s, causal, warmup, reps)
                print_row(config_records)
                records += config_records

    summary = summarize(records)
    show = lambda x: f"{x:.3f}" if x is not None else "-"
    for peer, name in (("fa2", "FA2"), ("cudnn", "cuDNN")):
        print(f"geometric mean, flashattn / {name + ':':6} forward {show(summary[f'fwd_vs_{peer}_geomean'])} "
              f"(min {show(summary[f'fwd_vs_{peer}_min'])})   backward {show(summary[f'bwd_vs_{peer}_geomean'])} "
              f"(min {show(summary[f'bwd_vs_{peer}_min'])})")
    meta = {
        **run_environment(torch, flashattn),
        "dtype": "bfloat16", "tokens": TOKENS, "hidden": HIDDEN, "warmup": warmup, "repetitions": reps,
        "backward_timing": "torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) after one forward",
    }
    result = {"meta": meta, "summary": summary, "records": records}
    json_path = os.path.join(out_dir, JSON_NAME)
    with open(json_path, "w") as fh:
        json.dump(result, fh, indent=1)
    print(f"wrote {json_path}")
    if not args.no_plot:
        png = os.path.join(out_dir, PNG_NAME)
        plot(result, png)
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
