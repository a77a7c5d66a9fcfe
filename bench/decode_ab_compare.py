#!/usr/bin/env python3
"""Variants of scripts/gpu_decode_ab.sh against each other and against SDPA, from its extracted archive.

    cd <folder of decode_ab.tar.gz, extracted> && python3 bench/decode_ab_compare.py tree,variantA,variantB

Per configuration and variant: the fastest over the variant's runs (run_<variant>_<n>/bench_decode.json) of the
eager and the graph-replayed medians; SDPA: the fastest backend's over every run. Prints each variant's time and
SDPA's time over it, then per variant the geometric mean and the minimum of that ratio and how many configurations
are below 0.98 and at or above 1.0.
"""
import collections
import glob
import json
import math
import sys


def key_of(r):
    return (r["nheads_k"], r["seqlen_q"], r["batch"], r["cache_len"], r["page_size"])


def main():
    names = sys.argv[1].split(",")
    ours = {n: collections.defaultdict(list) for n in names}
    sdpa = collections.defaultdict(list)
    for n in names:
        for path in glob.glob(f"run_{n}_*/bench_decode.json"):
            for r in json.load(open(path))["records"]:
                times = [t for t in (r["flashattn_us"], r.get("graph_us")) if t]
                if times:
                    ours[n][key_of(r)].append(min(times))
                if r["sdpa_best_us"]:
                    sdpa[key_of(r)].append(r["sdpa_best_us"])
    keys = sorted(ours[names[0]], key=lambda k: (k[0], k[1], k[2], k[3], k[4] or 0))
    print("hk sq  b  cache page | " + " | ".join(f"{n:>14}" for n in names) + " | sdpa_us")
    ratios = {n: [] for n in names}
    for k in keys:
        s = min(sdpa[k])
        cells = []
        for n in names:
            t = min(ours[n][k])
            ratios[n].append(s / t)
            cells.append(f"{t:7.1f} {s / t:5.3f}")
        print(f"{k[0]:2} {k[1]:2} {k[2]:2} {k[3]:6} {str(k[4]):4} | " + " | ".join(cells) + f" | {s:7.1f}")
    for n in names:
        v = ratios[n]
        print(f"{n} geomean sdpa/ours {math.exp(sum(map(math.log, v)) / len(v)):.4f}  min {min(v):.3f}  "
              f"<0.98: {sum(x < 0.98 for x in v)}  >=1: {sum(x >= 1 for x in v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
