#!/usr/bin/env python3
"""Summarise Nsight Compute's source page (`ncu --import R --page source --csv --print-source sass`): where a kernel's
warps were sampled, by stall reason, by opcode and by instruction.

    python3 scripts/ncu_top_stalls.py source.csv[.gz] [--top 40] [--range NAME:LO:HI ...]

--range sums the samples of the instructions at offsets LO to HI (hex, from the kernel's first instruction) by stall
reason, once for each range: a warp-specialised kernel's producer and consumer code lie in separate ranges, so the
ranges split the samples by role (bench/NOTES.md, "kv-cache: the paged producers' divisions").

Reads the columns by name, so it follows the CSV's header rather than a fixed layout: the sample count is the first
column named "Warp Stall Sampling (All Samples)" (or any "Sampling" column), the stall reasons are the columns whose
names hold "stall" or "pcsamp".
"""
import argparse
import csv
import gzip
import io
import re
import sys
from collections import defaultdict


def number(x):
    try:
        return float(str(x).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--range", action="append", default=[], help="NAME:LO:HI, hex offsets from the kernel's start")
    args = ap.parse_args()
    opener = gzip.open if args.csv.endswith(".gz") else open
    with opener(args.csv, "rt", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, ln in enumerate(lines) if '"Address"' in ln or ln.startswith("Address")
                  or '"Source"' in ln), None)
    if start is None:
        print("no header with Address/Source found; first lines:\n" + "\n".join(lines[:20]))
        return 1
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    cols = list(rows[0].keys()) if rows else []
    print(f"{len(rows)} instructions; columns: {cols}")
    sample_col = next((c for c in cols if c and "Warp Stall Sampling (All" in c), None) or \
        next((c for c in cols if c and "Sampling" in c), None)
    if not sample_col:
        return 1
    reasons = [c for c in cols if c and c != sample_col and re.search(r"stall|pcsamp", c, re.I)
               and "Not-issued" not in c and "Not Issued" not in c]  # all samples, not the not-issued share again
    total = sum(number(r[sample_col]) for r in rows)
    print(f"samples ({sample_col}): {total:.0f}")
    sums = {c: sum(number(r[c]) for r in rows) for c in reasons}
    print("\nby stall reason:")
    for c, v in sorted(sums.items(), key=lambda kv: -kv[1])[:25]:
        if v > 0:
            print(f"  {v / max(total, 1) * 100:6.2f}%  {c}")
    addr_col = "Address" if "Address" in cols else cols[0]
    base = min((int(r[addr_col], 16) for r in rows if r.get(addr_col, "").startswith("0x")), default=0)
    for text in args.range:
        name, lo, hi = text.split(":")
        inside = [r for r in rows if r.get(addr_col, "").startswith("0x")
                  and int(lo, 16) <= int(r[addr_col], 16) - base < int(hi, 16)]
        part = sum(number(r[sample_col]) for r in inside)
        top = sorted(((sum(number(r[c]) for r in inside), c) for c in reasons), reverse=True)[:6]
        why = ", ".join(f"{c} {n:.0f}" for n, c in top if n > 0)
        print(f"\n{name} ({lo}-{hi}): {part:.0f} samples, {part / max(total, 1) * 100:.1f}%: {why}")
    by_op = defaultdict(float)
    src_col = "Source" if "Source" in cols else cols[1]
    for r in rows:
        text = r.get(src_col, "").strip()
        op = re.sub(r"^@!?U?P\w+\s+", "", text).split(" ")[0] if text else "?"
        by_op[op] += number(r[sample_col])
    print("\nby opcode:")
    for op, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {v / max(total, 1) * 100:6.2f}%  {op}")
    print(f"\nthe {args.top} instructions sampled most (share, address, instruction, its top reasons):")
    for r in sorted(rows, key=lambda r: -number(r[sample_col]))[:args.top]:
        v = number(r[sample_col])
        top = sorted(((number(r[c]), c) for c in reasons), reverse=True)[:3]
        why = ", ".join(f"{c.split('_')[-1] if '_' in c else c} {n:.0f}" for n, c in top if n > 0)
        print(f"  {v / max(total, 1) * 100:6.2f}%  {r.get(addr_col, '')}  {r.get(src_col, '').strip()[:70]:70s}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
