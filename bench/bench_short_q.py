#!/usr/bin/env python3
"""Short query rows through the forward (flash_attn_func): packed query heads (the kv-cache kernel, keys split) against
the tiled forward, with PyTorch SDPA in the same run. This is what sets the forward's packing rule
(packed_forward_pays in src/kernels/dispatch.cpp).

Shapes: bf16, head dim 128, nheads_q 32 on nheads_k 8 or 32, causal (bottom-right), seqlen_q 1-256, seqlen_k 1k-16k,
batch 1/8/32. Each flashattn figure is the call captured in a CUDA graph with FLASHATTN_FORWARD_PACKED set to "1"
(packed) or "0" (tiled) at capture, then replayed: the kernels' time without the Python layer's. "default" is the
choice the rule makes without the variable. SDPA (cuDNN, flash) on (batch, heads, seqlen, hdim) tensors, as
bench_decode.py runs it (enable_gqa; a bottom-right boolean mask where seqlen_q > 1). Timing as bench_decode.py's:
median of CUDA-event times, an L2 flush before each call, no host sync in between.

    python3 bench/bench_short_q.py --out $OUT [--quick]

Writes $OUT/bench_short_q.json ({"meta", "records"}). Without a CUDA GPU it says so and exits 0.
"""
import argparse
import json
import os
import sys

import torch

from bench_decode import (DEVICE, DTYPE, HEAD_DIM, L2_FLUSH_BYTES, NHEADS_Q, QUICK_REPS, QUICK_WARMUP, REPS, WARMUP,
                          graph_of, run_sdpa, sdpa_has_enable_gqa, shape_seed, time_or_error)
from bench_python import first_line, run_environment

NHEADS_K = [8, 32]
SEQLENS_Q = [1, 4, 16, 64, 128, 256]
SEQLENS_K = [1024, 4096, 16384]
BATCHES = [1, 8, 32]
QUICK_SEQLENS_Q = [1, 16, 64, 256]
QUICK_SEQLENS_K = [4096]
PACKED_VARIABLE = "FLASHATTN_FORWARD_PACKED"
JSON_NAME = "bench_short_q.json"


def set_environment(settings):
    """Sets each {name: value} in os.environ (the C library's getenv sees it); a value of None unsets the name."""
    for name, value in settings.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def captured_time(call, settings, warmup, reps, flush):
    """(us, error) of `call` captured in a CUDA graph with the environment `settings` ({name: value or None}) in
    force at capture (the dispatch reads it then), then replayed."""
    saved = {name: os.environ.get(name) for name in settings}
    try:
        set_environment(settings)
        return time_or_error(graph_of(call).replay, warmup, reps, flush)
    except RuntimeError as err:
        return None, first_line(err)
    finally:
        set_environment(saved)


def flashattn_times(q, k, v, warmup, reps, flush, schedules):
    """{"packed" | "tiled" | "default" | "tiled_<schedule>": (us, error)}: the call under each setting."""
    from flashattn import flash_attn_func

    call = lambda: flash_attn_func(q, k, v, causal=True)
    results = {name: captured_time(call, {PACKED_VARIABLE: value}, warmup, reps, flush)
               for name, value in (("packed", "1"), ("tiled", "0"), ("default", None))}
    for schedule in schedules:  # the Hopper forward's schedules, one block a tile (FLASHATTN_SM90_SCHEDULE)
        results["tiled_" + schedule] = captured_time(
            call, {PACKED_VARIABLE: "0", "FLASHATTN_SM90_SCHEDULE": schedule, "FLASHATTN_SM90_PERSISTENT": "0"},
            warmup, reps, flush)
    return results


def run_shape(nheads_k, seqlen_q, seqlen_k, batch, native_gqa, warmup, reps, flush, schedules):
    gen = torch.Generator(device=DEVICE).manual_seed(shape_seed(nheads_k, seqlen_q, batch, seqlen_k))
    q = torch.randn(batch, seqlen_q, NHEADS_Q, HEAD_DIM, device=DEVICE, dtype=DTYPE, generator=gen)
    k = torch.randn(batch, seqlen_k, nheads_k, HEAD_DIM, device=DEVICE, dtype=DTYPE, generator=gen)
    v = torch.randn(batch, seqlen_k, nheads_k, HEAD_DIM, device=DEVICE, dtype=DTYPE, generator=gen)
    ours = flashattn_times(q, k, v, warmup, reps, flush, schedules)
    k = v = None
    sdpa = run_sdpa(q, gen, batch, nheads_k, seqlen_k, native_gqa, warmup, reps, flush)
    rec = {"nheads_q": NHEADS_Q, "nheads_k": nheads_k, "head_dim": HEAD_DIM, "seqlen_q": seqlen_q,
           "seqlen_k": seqlen_k, "batch": batch, "causal": True,
           "kv_tbs": 2 * batch * seqlen_k * nheads_k * HEAD_DIM * 2 / 1e6}  # divided by us below
    for name, (us, err) in list(ours.items()) + [("sdpa_" + n, r) for n, r in sdpa.items() if n != "efficient"]:
        rec[name + "_us"] = us
        if err:
            rec[name + "_error"] = err
    rec["kv_tbs"] = {name: rec["kv_tbs"] / us for name, (us, _) in ours.items() if us}  # K+V bytes read once
    if rec["packed_us"] and rec["tiled_us"]:
        rec["tiled_over_packed"] = rec["tiled_us"] / rec["packed_us"]
    best = min((t for t in (rec.get("packed_us"), rec.get("tiled_us")) if t), default=None)
    rec["default_is_best"] = bool(rec.get("default_us") and best and rec["default_us"] <= 1.03 * best)
    return rec


def fmt(us):
    return f"{us:9.1f}" if us else "        -"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nheads-k", type=int, nargs="+")
    ap.add_argument("--batches", type=int, nargs="+")
    ap.add_argument("--seqlens-q", type=int, nargs="+")
    ap.add_argument("--seqlens-k", type=int, nargs="+")
    ap.add_argument("--schedules", nargs="*", default=[],
                    help="also time the tiled Hopper forward one block a tile in these FLASHATTN_SM90_SCHEDULE values")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_short_q: no CUDA GPU visible; nothing measured")
        return 0
    warmup, reps = (QUICK_WARMUP, QUICK_REPS) if args.quick else (WARMUP, REPS)
    seqlens_q = args.seqlens_q or (QUICK_SEQLENS_Q if args.quick else SEQLENS_Q)
    seqlens_k = args.seqlens_k or (QUICK_SEQLENS_K if args.quick else SEQLENS_K)
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=DEVICE)
    native_gqa = sdpa_has_enable_gqa()
    print(" hk    sq     sk batch |   packed    tiled  default | tiled/packed |  cudnn us  flash us")
    records = []
    for nheads_k in args.nheads_k or NHEADS_K:
        for batch in args.batches or BATCHES:
            for seqlen_k in seqlens_k:
                for seqlen_q in seqlens_q:
                    rec = run_shape(nheads_k, seqlen_q, seqlen_k, batch, native_gqa, warmup, reps, flush,
                                    args.schedules)
                    records.append(rec)
                    if args.schedules:
                        print("    K+V TB/s: " + ", ".join(f"{n} {t:.2f}" for n, t in rec["kv_tbs"].items()))
                    ratio = rec.get("tiled_over_packed")
                    print(f"{nheads_k:3d} {seqlen_q:5d} {seqlen_k:6d} {batch:5d} | {fmt(rec['packed_us'])}"
                          f"{fmt(rec['tiled_us'])}{fmt(rec['default_us'])} | "
                          f"{ratio:12.3f} | {fmt(rec.get('sdpa_cudnn_us'))} {fmt(rec.get('sdpa_flash_us'))}"
                          if ratio else f"{nheads_k:3d} {seqlen_q:5d} {seqlen_k:6d} {batch:5d} | {rec}", flush=True)
    misses = [r for r in records if not r["default_is_best"]]
    print(f"default within 3% of the better of packed / tiled on {len(records) - len(misses)} of {len(records)} "
          "shapes")
    import flashattn

    meta = run_environment(torch, flashattn)
    meta.update({"dtype": "bfloat16", "warmup": warmup,
                 "repetitions": reps, "timing": "CUDA graph replay, median of CUDA-event times, L2 flush before each"})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, JSON_NAME), "w") as f:
        json.dump({"meta": meta, "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
