"""The kv-cache forward's numerics on long grids, the ones a plan rule changes and the tests are too small to reach:
each shape's call (random normal bf16 inputs, ragged cache lengths, pages scattered as bench_decode.py scatters them)
is checked against the float64 oracle of tests/python/attention_reference.py by the closeness rule (at most twice
the error of a plain bf16 implementation, plus a tiny slack), sequence by sequence, for each split count asked for.

    python3 bench/kvc_long_numerics.py --shapes 4:32:16384:256 8:16:8192:256 --splits 0 2

A shape is batch:nheads_k:cache_len[:page] (one query row, nheads_q 32, head dim 128, causal). Exits 1 on a miss.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import bench_decode as bd  # noqa: E402  (paged_cache, the sweep's sizes)
from attention_reference import assert_close_by_rule, attention_ref, max_error  # noqa: E402

SHORTEST_OF_CAPACITY = 0.5  # each sequence's length is drawn from [this x cache_len, cache_len]


def check_shape(batch, nheads_k, cache_len, page, splits, gen):
    from flashattn import flash_attn_with_kvcache

    dev, dtype = bd.DEVICE, bd.DTYPE
    q = torch.randn(batch, 1, bd.NHEADS_Q, bd.HEAD_DIM, device=dev, dtype=dtype, generator=gen)
    k = torch.randn(batch, cache_len, nheads_k, bd.HEAD_DIM, device=dev, dtype=dtype, generator=gen)
    v = torch.randn(batch, cache_len, nheads_k, bd.HEAD_DIM, device=dev, dtype=dtype, generator=gen)
    low = int(SHORTEST_OF_CAPACITY * cache_len)
    lengths = torch.randint(low, cache_len + 1, (batch,), device=dev, dtype=torch.int32, generator=gen)
    k_cache, v_cache, table = k, v, None
    if page:
        k_cache, v_cache, table = bd.paged_cache(k, v, page, gen)
        # The logical caches through the table (paged_cache cuts the dense storage into pages: gather them back).
        k = k_cache[table.long()].reshape(batch, cache_len, nheads_k, bd.HEAD_DIM)
        v = v_cache[table.long()].reshape(batch, cache_len, nheads_k, bd.HEAD_DIM)
    results = []
    for count in splits:
        out = torch.full_like(q, float("nan"))  # poisoned: every element must be written
        got, lse = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table,
                                           causal=True, num_splits=count, return_softmax_lse=True)
        out.copy_(got)
        worst = None
        for b in range(batch):
            n = int(lengths[b])
            args = (q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n])
            oracle, oracle_lse = attention_ref(*args, causal=True)
            plain, _ = attention_ref(*args, causal=True, dtype=dtype)
            assert_close_by_rule(out[b:b + 1], oracle, plain, f"out, sequence {b} ({n} keys), num_splits {count}")
            lse_error = max_error(lse[b], oracle_lse[0])
            assert lse_error < 1e-3, f"lse, sequence {b}: error {lse_error:.3g}"
            ratio = max_error(out[b:b + 1], oracle) / max(max_error(plain, oracle), 1e-30)
            worst = ratio if worst is None else max(worst, ratio)
        results.append((count, worst))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", required=True, help="batch:nheads_k:cache_len[:page]")
    ap.add_argument("--splits", type=int, nargs="+", default=[0], help="num_splits values (0: the plan's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default=bd.DEVICE, help="cpu: a dry run of the script on the CPU path")
    args = ap.parse_args()
    bd.DEVICE = args.device
    gen = torch.Generator(device=bd.DEVICE).manual_seed(args.seed)
    failed = 0
    for text in args.shapes:
        fields = [int(x) for x in text.split(":")]
        batch, nheads_k, cache_len = fields[:3]
        page = fields[3] if len(fields) > 3 else None
        try:
            results = check_shape(batch, nheads_k, cache_len, page, args.splits, gen)
            cells = "  ".join(f"{count}: error {ratio:.2f}x plain bf16's" for count, ratio in results)
            print(f"{text:>18} | ok | {cells}", flush=True)
        except AssertionError as err:
            failed += 1
            print(f"{text:>18} | FAILED | {err}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
