#!/usr/bin/env python3
"""Where a bench/bench_decode.py sweep stands against the decode speed target: at least the best PyTorch SDPA backend
(cuDNN on an H100/H200) on every configuration, and paged calls within 3% of dense ones.

    python3 bench/decode_targets.py run1/bench_decode.json [run2/bench_decode.json ...] [--lowest N]

Each file is counted on its own (the sweeps of one run are compared with each other, never merged): a record's time
is the faster of the eager call and its graph replay; its ratio is SDPA's best time over that (at least 1: at or above
the target). Per query-row count: the records at or above, those below 0.98, the dense ones at or above, and the
lowest ratios; then the paged records above 1.03x their own dense time, the worst first.
"""
import argparse
import json

TARGET = 1.0
NEAR = 0.98  # "below 0.98": the records that miss by more than run-to-run noise
PAGED_OVER_DENSE_MAX = 1.03


def ours_us(r):
    times = [t for t in (r.get("flashattn_us"), r.get("graph_us")) if t is not None]
    return min(times) if times else None


def label(r):
    page = r["page_size"] or "-"
    return f"{r['batch']}x{r['nheads_k']}x{r['cache_len'] // 1024}k:{page}"


def report(path, lowest):
    records = [r for r in json.load(open(path))["records"] if ours_us(r) is not None]
    print(path)
    for seqlen_q in sorted({r["seqlen_q"] for r in records}):
        rows = [(r["sdpa_best_us"] / ours_us(r), r) for r in records
                if r["seqlen_q"] == seqlen_q and r.get("sdpa_best_us")]
        if not rows:
            continue
        dense = [ratio for ratio, r in rows if r["page_size"] is None]
        print(f"  {seqlen_q} query row(s): at or above SDPA on {sum(ratio >= TARGET for ratio, _ in rows)} of "
              f"{len(rows)}, below {NEAR} on {sum(ratio < NEAR for ratio, _ in rows)}; dense at or above on "
              f"{sum(ratio >= TARGET for ratio in dense)} of {len(dense)}")
        worst = sorted(rows, key=lambda item: item[0])[:lowest]
        print("    lowest: " + ", ".join(f"{label(r)} {ratio:.3f}" for ratio, r in worst))
    dense_us = {(r["seqlen_q"], r["batch"], r["nheads_k"], r["cache_len"]): ours_us(r)
                for r in records if r["page_size"] is None}
    paged = [(ours_us(r) / dense_us[key], r) for r in records if r["page_size"]
             for key in [(r["seqlen_q"], r["batch"], r["nheads_k"], r["cache_len"])] if key in dense_us]
    over = sorted([(ratio, r) for ratio, r in paged if ratio > PAGED_OVER_DENSE_MAX], key=lambda item: -item[0])
    print(f"  paged over dense above {PAGED_OVER_DENSE_MAX} on {len(over)} of {len(paged)}" +
          (": " + ", ".join(f"{label(r)} q{r['seqlen_q']} {ratio:.3f} ({ours_us(r):.1f} us)"
                            for ratio, r in over[:lowest]) if over else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="bench_decode.json files")
    parser.add_argument("--lowest", type=int, default=8, help="how many of the lowest ratios to list")
    args = parser.parse_args()
    for path in args.files:
        report(path, args.lowest)


if __name__ == "__main__":
    main()
