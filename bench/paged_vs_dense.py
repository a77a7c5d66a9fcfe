#!/usr/bin/env python3
"""Paged against dense decode, and variants against each other, from bench/bench_decode.py's JSON files.

    python3 bench/paged_vs_dense.py LABEL=run1/bench_decode.json[,run2/bench_decode.json ...] [LABEL=...]

Each label's runs are merged by taking, per configuration, the fastest of its runs (graph-replayed time where it was
captured, else the eager call's). For every (kv heads, query rows, batch, cache length) the table prints the dense
time of the first label and, per label and page size, the paged time over that label's own dense time (the issue's
"paged within 3% of dense"); the last lines give, per label, the worst and the geometric mean of those ratios, and
each label's paged times over the first label's.
"""
import json
import math
import sys
from collections import defaultdict


def best_times(paths):
    """{(nheads_k, seqlen_q, batch, cache_len, page): us}, the fastest of the runs."""
    best = {}
    for path in paths:
        for r in json.load(open(path))["records"]:
            us = r.get("graph_us") or r.get("flashattn_us")
            if us is None:
                continue
            key = (r["nheads_k"], r["seqlen_q"], r["batch"], r["cache_len"], r["page_size"] or 0)
            best[key] = min(best.get(key, math.inf), us)
    return best


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    labels, times = [], {}
    for arg in sys.argv[1:]:
        label, _, paths = arg.partition("=")
        labels.append(label)
        times[label] = best_times(paths.split(","))
    if not labels:
        print(__doc__)
        return 2
    first = times[labels[0]]
    shapes = sorted({k[:4] for k in first})
    pages = sorted({k[4] for k in first if k[4]})
    ratios, against_first = defaultdict(list), defaultdict(list)
    head = "kv  q  batch  cache | dense us | " + " | ".join(f"{label} p{page}/dense" for label in labels for page in pages)
    print(head)
    for shape in shapes:
        dense0 = first.get(shape + (0,))
        cells = []
        for label in labels:
            t = times[label]
            dense = t.get(shape + (0,))
            for page in pages:
                paged = t.get(shape + (page,))
                if dense and paged:
                    ratios[(label, page)].append(paged / dense)
                    cells.append(f"{paged / dense:.3f}")
                    base = first.get(shape + (page,))
                    if base:
                        against_first[(label, page)].append(paged / base)
                else:
                    cells.append("-")
        nk, sq, b, n = shape
        print(f"{nk:2d} {sq:2d} {b:6d} {n:6d} | {dense0 or float('nan'):8.1f} | " + " | ".join(f"{c:>14s}" for c in cells))
    for label in labels:
        for page in pages:
            r = ratios[(label, page)]
            if r:
                print(f"{label} page {page}: paged / dense worst {max(r):.3f}, geometric mean {geomean(r):.3f}, "
                      f"over 1.03: {sum(x > 1.03 for x in r)} of {len(r)}; time / {labels[0]}'s "
                      f"{geomean(against_first[(label, page)]):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
