#!/usr/bin/env python3
"""Where ptxas put the P V wait in the Hopper forward's main loops, read from the SASS.

The specialised kernel's step issues S(j) and P(j-1) V(j-1), waits for S, runs the softmax and then waits for P V.
ptxas may move that second wait (`WARPGROUP.DEPBAR.LE gsb0, 0x0`) up above the exponentials, and then a warpgroup's
softmax no longer runs under its own P V product: the kernel's source pins it below half of them (bench/NOTES_sm90.md
v17), and a compiler change could undo that. This prints, for each specialised kernel's main loop, how many
exponentials (MUFU.EX2) come before that wait and how many after.
With --issue, also the instruction counts of the step's issue path (issue_path).

    cuobjdump -sass fwd_launch.cu.o | python3 scripts/sass_pv_wait.py [--kernel SUBSTRING]

Where the loop holds the speculative softmax's vote (BAR.RED), everything is counted up to it: the step computed
again after it runs only where the speculation failed.
A main loop is the shortest backward branch whose body holds a wait for one product group (`gsb0, 0x1`), then a wait
for all (`gsb0, 0x0`), and exponentials. One line a kernel: its traits, then "before / total".
"""
import argparse
import re
import sys

INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;")
FUNCTION = re.compile(r"Function : (\S+)")
BRANCH = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")


def kernels(lines):
    """(name, [(address, instruction)]) for each function of a cuobjdump listing."""
    name, body = None, []
    for line in lines:
        m = FUNCTION.search(line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = INSTR.match(line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2)))
    if name:
        yield name, body


def main_loop(body):
    """The shortest loop (backward branch) holding both waits and exponentials, as a slice of `body`."""
    index = {addr: i for i, (addr, _) in enumerate(body)}
    best = None
    for i, (addr, text) in enumerate(body):
        m = BRANCH.search(text)
        if not m or int(m.group(1), 16) >= addr or int(m.group(1), 16) not in index:
            continue
        lo = index[int(m.group(1), 16)]
        loop = body[lo:i + 1]
        texts = [t for _, t in loop]
        if (any("DEPBAR.LE gsb0, 0x1" in t for t in texts) and any("DEPBAR.LE gsb0, 0x0" in t for t in texts)
                and any("MUFU.EX2" in t for t in texts)):
            if best is None or len(loop) < len(best):
                best = loop
    return best


def step(loop):
    """The loop up to the warpgroup's vote of the speculative softmax (BAR.RED), if it has one: what every step runs.
    What follows the vote is the step computed again, which runs only where the speculation failed."""
    for k, (_, t) in enumerate(loop):
        if "BAR.RED" in t:
            return loop[:k + 1]
    return loop


def exponentials_around_wait(loop):
    """(exponentials between the S wait and the P V wait, exponentials in the loop)."""
    total = sum("MUFU.EX2" in t for _, t in loop)
    seen_s_wait, before = False, 0
    for _, t in loop:
        if "DEPBAR.LE gsb0, 0x1" in t:
            seen_s_wait, before = True, 0
        elif "DEPBAR.LE gsb0, 0x0" in t and seen_s_wait:
            return before, total
        elif "MUFU.EX2" in t and seen_s_wait:
            before += 1
    return None, total


def issue_path(loop):
    """Instructions from the turn's barrier (BAR.SYNC) to the first product, from the first product to the last, and
    from the P V wait to the step's end (the loop's back branch, or the speculative softmax's vote): the parts of a
    step between a warpgroup's softmax and its next products (bench/NOTES_sm90.md v30). None where the loop has no
    barrier (turns off, or one warpgroup)."""
    texts = [t for _, t in loop]
    products = [k for k, t in enumerate(texts) if "HGMMA" in t]
    barriers = [k for k, t in enumerate(texts) if "BAR.SYNC" in t and (not products or k < products[0])]
    waits = [k for k, t in enumerate(texts) if "DEPBAR.LE gsb0, 0x0" in t]
    if not products or not barriers or not waits:
        return None
    return products[0] - barriers[0], products[-1] - products[0], len(texts) - waits[-1]


def label(name):
    """dtype, head dim, consumer warpgroups, key tile, head dim of V, persistent, from a specialised kernel's name."""
    m = re.search(r"Sm90FwdTraitsI(\w+?)Li(\d+)ELi(\d+)ELNS0_12Sm90ScheduleE\d+ELi(\d+)ELi(\d+)EEELb([01])", name)
    if not m:
        return name[-60:]
    elem = "bf16" if "bfloat16" in m.group(1) else "fp16"
    return (f"{elem} hd{m.group(2)}/{m.group(5)} {m.group(3)}wg {m.group(4)}-key tiles"
            f"{' persistent' if m.group(6) == '1' else ''}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="fwd_sm90_specialised_kernel", help="a substring of the kernels to read")
    ap.add_argument("--issue", action="store_true",
                    help="also the instructions from the turn's barrier to the first product, from the first product "
                         "to the last, and from the P V wait to the step's end (issue_path)")
    args = ap.parse_args()
    found = 0
    for name, body in kernels(sys.stdin):
        if args.kernel not in name:
            continue
        loop = main_loop(body)
        if loop is None:
            continue
        loop = step(loop)
        before, total = exponentials_around_wait(loop)
        line = f"{label(name)}: {before if before is not None else '?'} / {total}"
        if args.issue:
            path = issue_path(loop)
            line += f" | issue {path[0]} + {path[1]}, tail {path[2]}" if path else " | issue -"
        print(line)
        found += 1
    if not found:
        print(f"no main loop found in kernels matching {args.kernel!r}")


if __name__ == "__main__":
    main()
