"""flash_attn_with_kvcache against a straightforward torch implementation: dense and paged caches, appending in
place (across page boundaries), rotary in both styles, cache_batch_idx, left padding, masks, GQA. CPU tensors here;
the same on a GPU where there is one and flashattn has a kv-cache kernel for it."""

import re

import pytest
import torch

import flashattn
from attention_reference import alibi_for, assert_close_by_rule, attention_ref
from flashattn import flash_attn_with_kvcache

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def rotate(x, cos, sin, positions, interleaved):
    """Rotary embedding of x (seqlen, nheads, d) at `positions` (seqlen,), in float64, rounded to x's dtype."""
    half = cos.shape[-1]
    c = cos.double()[positions].unsqueeze(1)  # (seqlen, 1, half)
    s = sin.double()[positions].unsqueeze(1)
    y = x.double().clone()
    if interleaved:
        x0, x1 = y[..., 0 : 2 * half : 2].clone(), y[..., 1 : 2 * half : 2].clone()
        y[..., 0 : 2 * half : 2], y[..., 1 : 2 * half : 2] = x0 * c - x1 * s, x0 * s + x1 * c
    else:
        x0, x1 = y[..., :half].clone(), y[..., half : 2 * half].clone()
        y[..., :half], y[..., half : 2 * half] = x0 * c - x1 * s, x0 * s + x1 * c
    return y.float().to(x.dtype)  # through float32, as flashattn rounds (double -> float -> 16-bit)


def cache_rows(cache, b, block_table, batch_idx, end):
    """Sequence b's logical cache rows [0, end) as a list of (tensor, row) addresses (views of `cache`)."""
    if block_table is None:
        entry = cache[batch_idx[b] if batch_idx is not None else b]
        return [(entry, r) for r in range(end)]
    page = cache.shape[1]
    pages = [cache[block] for block in block_table[b].tolist()[: -(-end // page)]]
    return [(pages[r // page], r % page) for r in range(end)]


def nan_past(cache, lengths, seqlen_new, block_table, batch_idx, leftpad, randn):
    """`cache` (all NaN) with random values in the rows sequence b holds after its append: [leftpad[b], lengths[b] +
    seqlen_new)."""
    for b, length in enumerate(lengths):
        end = length + seqlen_new
        first = leftpad[b] if leftpad is not None else 0
        values = randn(end - first, *cache.shape[2:])
        for value, (tensor, row) in zip(values, cache_rows(cache, b, block_table, batch_idx, end)[first:]):
            tensor[row] = value
    return cache


def cuda_randn(seed):
    """randn(*shape): bf16 normal values on the GPU, drawn on the CPU from a generator seeded with `seed`, which is
    randn.generator (for other draws from the same sequence)."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen).to("cuda", torch.bfloat16)
    randn.generator = gen
    return randn


def random_block_table(num_blocks, batch, pages_per_seq, gen):
    """A block table (batch, pages_per_seq) of int32 on the CPU: distinct blocks of a pool of num_blocks in random
    order (a permutation drawn from `gen`, cut to the table's size)."""
    return torch.randperm(num_blocks, generator=gen)[: batch * pages_per_seq].view(batch, -1).to(torch.int32)


def same_values(a, b):
    """torch.equal, with NaN equal to NaN (caches whose unread rows are NaN). The same bits are the same values (one
    pass, no temporaries: these caches reach gigabytes); else element by element, where 0.0 equals -0.0."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.element_size() == 2 and torch.equal(a.contiguous().view(torch.int16), b.contiguous().view(torch.int16)):
        return True
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def kvcache_ref(q, k_cache, v_cache, k, v, *, cache_seqlens, rotary=None, interleaved=True, batch_idx=None,
                leftpad=None, block_table=None, causal=False, dtype=torch.float64, **options):
    """(out, lse, k_cache', v_cache') computed plainly: appends, rotates, gathers, then attention_ref."""
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    outs, lses = [], []
    windowed = causal or tuple(options.get("window_size", (-1, -1))) != (-1, -1)
    for b in range(q.shape[0]):
        length = cache_seqlens[b]
        first = leftpad[b] if leftpad is not None else 0
        end = length + (k.shape[1] if k is not None else 0)
        k_rows = cache_rows(k_cache, b, block_table, batch_idx, end)
        v_rows = cache_rows(v_cache, b, block_table, batch_idx, end)
        qb = q[b]
        if k is not None:
            new_k = k[b]
            if rotary is not None:
                new_k = rotate(new_k, *rotary, torch.arange(length, length + k.shape[1]), interleaved)
            for t in range(k.shape[1]):
                tensor, row = k_rows[length + t]
                tensor[row] = new_k[t]
                tensor, row = v_rows[length + t]
                tensor[row] = v[b, t]
        if rotary is not None:
            positions = torch.arange(length, length + q.shape[1]) if windowed else torch.full((q.shape[1],), length)
            qb = rotate(qb, *rotary, positions, interleaved)
        keys = torch.stack([t[r] for t, r in k_rows[first:end]]) if end > first else k_cache.new_empty(
            0, *k_cache.shape[2:])
        values = torch.stack([t[r] for t, r in v_rows[first:end]]) if end > first else v_cache.new_empty(
            0, *v_cache.shape[2:])
        slopes = options.get("alibi_slopes")
        opts = dict(options, alibi_slopes=slopes[b] if slopes is not None and slopes.dim() == 2 else slopes)
        out, lse = attention_ref(qb[None], keys[None], values[None], causal=causal, dtype=dtype, **opts)
        outs.append(out[0])
        lses.append(lse[0])
    return torch.stack(outs), torch.stack(lses), k_cache, v_cache


def rotary_tables(seqlen_ro, rotary_dim, dtype):
    angles = torch.arange(seqlen_ro, dtype=torch.float64).view(-1, 1) * torch.rand(rotary_dim // 2,
                                                                                   dtype=torch.float64)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def assert_lse_close(lse, want_lse):
    """The kernel's LSE against the float64 oracle's: infinite in the same places, elsewhere within 1e-3."""
    lse, finite = lse.cpu(), torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse[finite].double() - want_lse[finite]).abs().max().item() < 1e-3


def check(device, dtype, *, batch=3, seqlen_q=1, nheads=8, nheads_k=2, head_dim=64, seqlen_cache=100,
          seqlen_new=1, page_size=None, rotary_dim=0, interleaved=True, batch_cache=None, permute=False,
          use_leftpad=False, int_seqlens=False, lengths=None, num_splits=0, nan_past_lengths=False, **options):
    # nan_past_lengths: only the rows a sequence holds after the append are random, every other cache row (past its
    # length, before its left padding, in no sequence) is NaN: no kernel may let one reach a result. It also spares
    # the large-grid cases generating gigabytes of random rows.
    if device != "cpu" and dtype == torch.float32:
        dtype = torch.bfloat16  # GPU kernels take 16-bit inputs; float32 cases run in bf16 there
    gen = torch.Generator().manual_seed(batch * 100 + seqlen_q * 10 + seqlen_new)
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float32).to(dtype)
    q = randn(batch, seqlen_q, nheads, head_dim)
    k = randn(batch, seqlen_new, nheads_k, head_dim) if seqlen_new else None
    v = randn(batch, seqlen_new, nheads_k, head_dim) if seqlen_new else None
    if lengths is not None:
        assert len(lengths) == batch
    elif int_seqlens:
        lengths = [seqlen_cache - seqlen_new - 3] * batch
    else:
        lengths = torch.randint(0, seqlen_cache - seqlen_new + 1, (batch,), generator=gen).tolist()
    leftpad = [min(torch.randint(0, 8, (), generator=gen).item(), n) for n in lengths] if use_leftpad else None
    block_table = batch_idx = None
    # With nan_past_lengths the caches start as NaN, their sequences' rows filled below.
    cache_of = (lambda *shape: torch.full(shape, float("nan"), dtype=dtype)) if nan_past_lengths else randn
    if page_size:
        pages_per_seq = -(-seqlen_cache // page_size)
        num_blocks = batch * pages_per_seq + 2
        k_cache, v_cache = cache_of(num_blocks, page_size, nheads_k, head_dim), cache_of(num_blocks, page_size,
                                                                                       nheads_k, head_dim)
        block_table = random_block_table(num_blocks, batch, pages_per_seq, gen)
    else:
        entries = batch_cache or batch
        k_cache, v_cache = cache_of(entries, seqlen_cache, nheads_k, head_dim), cache_of(entries, seqlen_cache,
                                                                                       nheads_k, head_dim)
        if permute:
            batch_idx = torch.randperm(entries, generator=gen)[:batch].to(torch.int32)
    if nan_past_lengths:
        k_cache, v_cache = (nan_past(cache, lengths, seqlen_new, block_table, batch_idx, leftpad, randn)
                            for cache in (k_cache, v_cache))
    # Tables cover every position a cache of this capacity can rotate (a paged capacity is rounded up to pages).
    capacity = block_table.shape[1] * page_size if page_size else seqlen_cache
    rotary = rotary_tables(capacity + seqlen_q, rotary_dim, dtype) if rotary_dim else None
    if options.get("alibi_slopes") == "per_batch_head":
        options["alibi_slopes"] = alibi_for(nheads, batch)

    want_out, want_lse, want_k, want_v = kvcache_ref(
        q, k_cache, v_cache, k, v, cache_seqlens=lengths, rotary=rotary, interleaved=interleaved,
        batch_idx=batch_idx, leftpad=leftpad, block_table=block_table, **options)
    same_out, _, _, _ = kvcache_ref(
        q, k_cache, v_cache, k, v, cache_seqlens=lengths, rotary=rotary, interleaved=interleaved,
        batch_idx=batch_idx, leftpad=leftpad, block_table=block_table, dtype=dtype, **options)

    def run_on(where):
        """flashattn on `where`: (out, lse, k_cache, v_cache) after the call."""
        to = lambda t: None if t is None else t.to(where)
        k_run, v_run = to(k_cache).clone(), to(v_cache).clone()
        out, lse = flash_attn_with_kvcache(
            to(q), k_run, v_run, to(k), to(v), rotary_cos=to(rotary[0]) if rotary else None,
            rotary_sin=to(rotary[1]) if rotary else None,
            cache_seqlens=lengths[0] if int_seqlens else to(torch.tensor(lengths, dtype=torch.int32)),
            cache_batch_idx=to(batch_idx),
            cache_leftpad=to(torch.tensor(leftpad, dtype=torch.int32)) if leftpad else None,
            block_table=to(block_table), rotary_interleaved=interleaved, return_softmax_lse=True,
            num_splits=num_splits,
            **{key: to(val) if isinstance(val, torch.Tensor) else val for key, val in options.items()})
        return out, lse, k_run, v_run

    out, lse, k_dev, v_dev = run_on(device)
    if device != "cpu":
        # The GPU against flashattn's CPU reference too: the same cache contents to the bit.
        _, _, k_ref, v_ref = run_on("cpu")
        assert same_values(k_dev.cpu(), k_ref) and same_values(v_dev.cpu(), v_ref)
    assert_close_by_rule(out.cpu(), want_out, same_out, "out")
    assert_lse_close(lse, want_lse)
    # The caches: the appended rows as the reference wrote them, every other row untouched.
    assert same_values(k_dev.cpu(), want_k)
    assert same_values(v_dev.cpu(), want_v)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_dense_append_rotary_interleaved_causal(device, dtype):
    check(device, dtype, seqlen_q=4, seqlen_new=4, rotary_dim=64, interleaved=True, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size", [16, 48, 256])
def test_paged_append_across_pages_rotary_neox(device, page_size):
    check(device, torch.bfloat16, seqlen_q=3, seqlen_new=17, seqlen_cache=300, page_size=page_size, rotary_dim=32,
          interleaved=False, causal=True)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_idx_permutation_leftpad_window_softcap(device):
    check(device, torch.float32, batch=3, batch_cache=5, permute=True, use_leftpad=True, seqlen_q=2, seqlen_new=2,
          window_size=(20, 0), softcap=3.0)


@pytest.mark.parametrize("device", DEVICES)
def test_decode_without_append_alibi_mqa(device):
    check(device, torch.bfloat16, seqlen_new=0, nheads=8, nheads_k=1, alibi_slopes="per_batch_head",
          rotary_dim=16, interleaved=True)


@pytest.mark.parametrize("device", DEVICES)
def test_int_cache_seqlens_and_non_causal_rotary_positions(device):
    # Not causal: every query row rotates at cache_seqlens (flash_attn's rule).
    check(device, torch.float32, seqlen_q=5, seqlen_new=2, rotary_dim=64, int_seqlens=True)


def test_whole_cache_when_cache_seqlens_absent():
    torch.manual_seed(0)
    q, k_cache, v_cache = torch.randn(2, 3, 4, 32), torch.randn(2, 50, 2, 32), torch.randn(2, 50, 2, 32)
    out = flash_attn_with_kvcache(q, k_cache, v_cache, causal=True)
    want, _ = attention_ref(q, k_cache, v_cache, causal=True)
    same, _ = attention_ref(q, k_cache, v_cache, causal=True, dtype=torch.float32)
    assert_close_by_rule(out, want, same, "out")


def test_errors_name_the_argument():
    q, k_cache, v_cache = torch.randn(2, 1, 4, 32), torch.randn(2, 10, 2, 32), torch.randn(2, 10, 2, 32)
    k, v = torch.randn(2, 3, 2, 32), torch.randn(2, 3, 2, 32)
    with pytest.raises(flashattn.Error, match="cache_seqlens"):
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=torch.tensor([8, 2], dtype=torch.int32))
    with pytest.raises(flashattn.Error, match="^k_cache: .*page_size"):
        flash_attn_with_kvcache(q, torch.randn(4, 24, 2, 32), torch.randn(4, 24, 2, 32),
                                cache_seqlens=torch.tensor([1, 1], dtype=torch.int32),
                                block_table=torch.zeros(2, 1, dtype=torch.int32))
    with pytest.raises(ValueError, match="k, v"):
        flash_attn_with_kvcache(q, k_cache, v_cache, k=k)


def test_torch_compile_fullgraph_with_cache_mutation():
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 1, 4, 32), torch.randn(2, 1, 2, 32), torch.randn(2, 1, 2, 32)
    lengths = torch.tensor([3, 7], dtype=torch.int32)
    caches = [torch.randn(2, 16, 2, 32) for _ in range(2)]
    eager_caches = [c.clone() for c in caches]

    def step(q, k, v, k_cache, v_cache):
        return flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lengths, causal=True) * 2.0

    eager = step(q, k, v, *eager_caches)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")(q, k, v, *caches)
    assert torch.equal(compiled, eager)
    assert torch.equal(caches[0], eager_caches[0]) and torch.equal(caches[1], eager_caches[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits", [1, 3, 0])
def test_long_cache_split_kv(device, num_splits):
    # Split-KV: each split attends to a share of the cache and the combine merges them by LSE; 0 lets flashattn
    # choose. Ragged lengths, one sequence empty before its append.
    check(device, torch.bfloat16, batch=4, seqlen_q=1, nheads=16, nheads_k=4, head_dim=128, seqlen_cache=2100,
          seqlen_new=1, lengths=[2000, 0, 777, 1025], num_splits=num_splits, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits,cluster,page_size,seqlen_q", [
    (2, "", None, 1), (5, "", 16, 4), (16, "", None, 1), (16, "", 64, 2), (16, "0", 16, 1), (20, "", None, 1),
    (0, "", 16, 1), (0, "0", None, 1)])
def test_splits_merged_in_a_cluster_or_by_the_combine(device, num_splits, cluster, page_size, seqlen_q, monkeypatch):
    # On an H100 the Hopper kernel merges up to 16 splits of a sequence's kv head inside a thread block cluster (each
    # split's block reads the others' partial rows from their shared memory); more splits, or FLASHATTN_KVC_CLUSTER=0,
    # go through the workspace and the combine kernel. Ragged lengths leave splits that see no key (one sequence sees
    # none at all), a window cuts the first ones, and 4 query rows make 16 packed rows.
    monkeypatch.setenv("FLASHATTN_KVC_CLUSTER", cluster)
    check(device, torch.bfloat16, batch=3, seqlen_q=seqlen_q, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=1500,
          seqlen_new=0, lengths=[1500, 0, 333], page_size=page_size, num_splits=num_splits, causal=True,
          window_size=(1100, 0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("merge_group", ["2", "0"])
@pytest.mark.parametrize("batch,num_splits,page_size,seqlen_q", [
    (3, 3, None, 1), (3, 8, 16, 4), (1, 13, None, 1), (1, 16, 64, 2), (1, 5, None, 16), (2, 7, None, 4)])
def test_cluster_merge_two_splits_at_a_time(device, merge_group, batch, num_splits, page_size, seqlen_q, monkeypatch,
                                            capfd):
    # FLASHATTN_KVC_MERGE_GROUP=2: the cluster merge two splits at a time with a running maximum (an odd split count's
    # last group half empty, splits that saw no key, rows no split saw, and 16 query rows of 4 heads, 64 packed rows,
    # among the cases), and =0 the default merge, 8 splits at a time. Batches small enough for the clusters of
    # 13 and 16 to fit the GPU at once (else the combine merges them).
    monkeypatch.setenv("FLASHATTN_KVC_MERGE_GROUP", merge_group)
    monkeypatch.setenv("FLASHATTN_KVC_PRINT_PLAN", "1")
    check(device, torch.bfloat16, batch=batch, seqlen_q=seqlen_q, nheads=32, nheads_k=8, head_dim=128,
          seqlen_cache=1500, seqlen_new=0, lengths=[1500, 0, 333][:batch], page_size=page_size,
          num_splits=num_splits, causal=True, window_size=(1100, 0))
    if device == "cuda":
        err = capfd.readouterr().err
        assert "(merge: cluster)" in err and f"merge_group {merge_group}" in err, err


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seqlen_q,seqlen_new,page_size,num_splits,rotary_dim", [
    (1, 0, None, 1, 0), (1, 1, 16, 0, 0), (4, 0, 64, 5, 0), (1, 1, None, 20, 64), (2, 0, 256, 0, 0)])
def test_general_instance_on_plain_calls(device, seqlen_q, seqlen_new, page_size, num_splits, rotary_dim,
                                         monkeypatch):
    # FLASHATTN_KVC_LEAN=0: the calls the Hopper kernel's lean instance takes by default (one kv head a block, no
    # softcap or ALiBi, pages in table order, fixed splits) on its general instance, whose plain path the rest of this
    # file then no longer reaches: one split, splits merged in a cluster and by the combine kernel, appends, rotary.
    monkeypatch.setenv("FLASHATTN_KVC_LEAN", "0")
    monkeypatch.setenv("FLASHATTN_KVC_HEAD_GROUP", "1")
    check(device, torch.bfloat16, batch=3, seqlen_q=seqlen_q, nheads=32, nheads_k=8, head_dim=128,
          seqlen_cache=1500, seqlen_new=seqlen_new, lengths=[1400, 0, 333], page_size=page_size,
          num_splits=num_splits, rotary_dim=rotary_dim, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size", [None, 16])
def test_split_count_fitted_to_the_clusters(device, page_size, monkeypatch, capfd):
    # Where the heuristic's split count makes more clusters than the GPU holds at once (batch 4 x 8 kv heads from
    # about 4k keys: 32 clusters of 8 where an H100 holds 30) and the splits are short (8k keys: 19 tiles each at 7),
    # the planner takes the most splits from 0.85 of it whose clusters fit (7) and merges them in clusters of that
    # size. Ragged lengths leave splits with no key. On a GPU the plans without and with the rule
    # (FLASHATTN_KVC_FIT_CLUSTER=0, unset) are read back (FLASHATTN_KVC_PRINT_PLAN): where the heuristic's splits go
    # to the combine kernel, the rule's must merge in a cluster, with fewer splits.
    monkeypatch.delenv("FLASHATTN_KVC_FIT_CLUSTER", raising=False)
    monkeypatch.delenv("FLASHATTN_KVC_LAST_MERGE", raising=False)
    check(device, torch.bfloat16, batch=4, seqlen_q=1, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=8192,
          seqlen_new=0, lengths=[8192, 1, 5900, 8100], page_size=page_size, num_splits=0, causal=True,
          nan_past_lengths=True)
    if device == "cpu":
        return
    randn = cuda_randn(5)
    q, k_cache, v_cache = randn(4, 1, 32, 128), randn(4, 8192, 8, 128), randn(4, 8192, 8, 128)
    lengths = torch.full((4,), 8192, dtype=torch.int32, device="cuda")
    table = None
    if page_size:
        table = torch.arange(4 * 8192 // page_size, dtype=torch.int32, device="cuda").reshape(4, -1)
        k_cache, v_cache = (t.reshape(-1, page_size, 8, 128) for t in (k_cache, v_cache))
    plans = {}
    monkeypatch.setenv("FLASHATTN_KVC_PRINT_PLAN", "1")
    for fit in ("0", ""):
        monkeypatch.setenv("FLASHATTN_KVC_FIT_CLUSTER", fit)
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table, causal=True)
        torch.cuda.synchronize()
        plans[fit] = re.search(r"splits (\d+) \(merge: (\w+)\)", capfd.readouterr().err).groups()
    (splits, merge), (fitted, fitted_merge) = plans["0"], plans[""]
    if merge == "combine" and int(splits) <= 16:
        assert fitted_merge == "cluster" and int(fitted) < int(splits), plans
    else:
        assert plans[""] == plans["0"], plans


def captured(call):
    """(graph, outputs): call() captured in a CUDA graph, after a warm-up call on a side stream as torch's capture
    recipe asks; outputs are the capture's static tensors, which each replay writes."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = call()
    return graph, outputs


def poisoned_replays(graph, outputs, times=3):
    """Replays graph `times` times, each after filling its static outputs with NaN, and yields once a replay has
    finished: every element the caller then checks was written by that replay."""
    for _ in range(times):
        for t in outputs:
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        yield


def filled_allocator(fill):
    """An allocator for flashattn's scratch memory that hands out buffers filled with `fill`: "ff" (every byte 0xFF),
    "random" (seeded random bytes), or an int (every 4-byte word that value)."""
    def alloc(t):
        if not t.is_cuda:
            return None

        def nbytes_filled(nbytes):
            if fill == "ff":
                buf = torch.full((nbytes,), 0xFF, dtype=torch.uint8, device=t.device)
            elif fill == "random":
                gen = torch.Generator(device=t.device).manual_seed(nbytes)
                buf = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=t.device, generator=gen)
            else:
                assert nbytes % 4 == 0
                buf = torch.full((nbytes // 4,), fill, dtype=torch.int32, device=t.device).view(torch.uint8)
            return flashattn._ops._d(buf)
        return nbytes_filled
    return alloc


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits,cluster,page_size,seqlen_q,options", [
    (3, "0", None, 1, dict()),
    (8, "0", 16, 4, dict()),
    (20, "", 16, 1, dict()),                 # past a cluster's 16
    (32, "", None, 1, dict()),
    (5, "0", None, 4, dict()),
    (4, "0", None, 32, dict()),              # 128 packed rows: two row blocks a unit
    (3, "0", None, 1, dict(group="8")),      # 8 kv heads a block
    (6, "0", 64, 2, dict(group="max")),      # 4 kv heads a block, in 16-row pieces of 64-row pages
    (4, "0", 16, 1, dict(head_dim=96)),      # head dim below its instance's 128
])
def test_splits_merged_by_the_last_block(device, num_splits, cluster, page_size, seqlen_q, options, monkeypatch,
                                         capfd):
    # FLASHATTN_KVC_LAST_MERGE=1: splits that do not merge in a cluster (FLASHATTN_KVC_CLUSTER=0, or more than 16)
    # are merged by each unit's last block to finish instead of the combine kernel, in one group of loads (3-8 splits)
    # or two of 16 (20, 32: the groups' running max and sum rescaled). Ragged lengths leave splits with no key (and one
    # sequence none at all), a window cuts the first ones; 4 query rows make 16 packed rows, 32 two row blocks. On a
    # GPU the plan print says the path was taken.
    options = dict(options)
    group = options.pop("group", None)
    monkeypatch.setenv("FLASHATTN_KVC_LAST_MERGE", "1")
    monkeypatch.setenv("FLASHATTN_KVC_CLUSTER", cluster)
    monkeypatch.setenv("FLASHATTN_KVC_PRINT_PLAN", "1")
    if group:
        monkeypatch.setenv("FLASHATTN_KVC_HEAD_GROUP", group)
    options.setdefault("head_dim", 128)
    check(device, torch.bfloat16, batch=3, seqlen_q=seqlen_q, nheads=32, nheads_k=8, seqlen_cache=2100,
          seqlen_new=0, lengths=[2100, 0, 333], page_size=page_size, num_splits=num_splits, causal=True,
          window_size=(1700, 0), **options)
    if device == "cuda":
        assert f"splits {num_splits} (merge: last block)" in capfd.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the last-block merge is the GPU kernel's")
@pytest.mark.parametrize("fill", ["ff", "random", 1, 2])
def test_last_block_merge_from_any_workspace(fill, monkeypatch, capfd):
    # The last-block merge flags each split's arrival in the caller's workspace, which nothing zeroes: whatever it
    # holds (0xFF bytes, random bytes, every 32-bit flag set to 1 or 2: the tags a launch counter starting from 1
    # would hand out first, in every process; a block that trusted them would merge before the other splits have
    # written; the counter starts at random), the results are the reference's. Then, with torch's own scratch memory,
    # a CUDA graph replayed three times: the same workspace and the capture's tag each time, so each replay finds the
    # flags as the last left them (cleared by the merging block): equal to the bit to an eager call.
    monkeypatch.setenv("FLASHATTN_KVC_LAST_MERGE", "1")
    torch_allocator = flashattn._ops._allocator_for
    monkeypatch.setattr(flashattn._ops, "_allocator_for", filled_allocator(fill))
    # 4 x 8 kv heads, 12 splits: 32 units, more than the 16 clusters of 12 a GPU of 132 SMs holds.
    check("cuda", torch.bfloat16, batch=4, seqlen_q=1, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=3000,
          seqlen_new=0, lengths=[3000, 1, 1777, 2900], num_splits=12, causal=True)
    monkeypatch.setattr(flashattn._ops, "_allocator_for", torch_allocator)
    randn = cuda_randn(17)
    q, k_cache, v_cache = randn(4, 1, 32, 128), randn(4, 3000, 8, 128), randn(4, 3000, 8, 128)
    lengths = torch.tensor([3000, 1, 1777, 2900], dtype=torch.int32, device="cuda")
    monkeypatch.setenv("FLASHATTN_KVC_PRINT_PLAN", "1")
    call = lambda: flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, causal=True, num_splits=12,
                                           return_softmax_lse=True)
    first = call()
    torch.cuda.synchronize()
    assert "splits 12 (merge: last block)" in capfd.readouterr().err
    monkeypatch.delenv("FLASHATTN_KVC_PRINT_PLAN")
    graph, (static_out, static_lse) = captured(call)
    for _ in poisoned_replays(graph, (static_out, static_lse)):
        assert torch.equal(static_out, first[0]) and torch.equal(static_lse, first[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits,chunk,cluster,page_size,seqlen_q,options", [
    (3, "1", "0", None, 1, dict()),
    (8, "2", "0", 16, 4, dict()),
    (8, "2", "", 16, 1, dict()),                   # merged in a cluster
    (20, "3", "", None, 1, dict()),                # past a cluster's 16: the combine
    (5, "1", "0", 64, 1, dict(group="max")),       # 4 kv heads a block, in 16-row pieces of 64-row pages
    (4, "2", "0", 16, 1, dict(head_dim=96)),       # head dim below its instance's 128
    (4, "1", "0", 16, 2, dict(one_producer="1")),  # one producer warp issuing K and V
    (6, "2", "0", 16, 1, dict(softcap=5.0)),       # the general loop
    (8, "1", "0", 16, 1, dict(batch=16)),          # 1024 blocks: late ones find every chunk claimed
    (4, "2", "0", 16, 1, dict(ahead="1")),         # one tile ahead: the end's stage waited for
    (8, "2", "0", 16, 1, dict(last_merge="1")),    # merged by the unit's last block
    (6, "2", "0", 16, 1, dict(k_first="0")),       # both producer warps at once
    (5, "2", "0", 16, 2, dict(rotary_dim=64)),     # rotated queries in the workspace too
])
def test_splits_balanced(device, num_splits, chunk, cluster, page_size, seqlen_q, options, monkeypatch, capfd):
    # FLASHATTN_KVC_BALANCE=n: a unit's splits take its tiles n at a time from a counter they share, in whatever order
    # the claims come, rather than a fixed share each; a block may get none. Ragged lengths leave units with few
    # tiles (one with none), a window cuts the first ones, 4 query rows make 16 packed rows; with the other plan
    # switches each case names. On a GPU the plan print says the path was taken.
    options = dict(options)
    batch = options.pop("batch", 3)
    for key, variable in [("group", "HEAD_GROUP"), ("one_producer", "ONE_PRODUCER"), ("ahead", "AHEAD"),
                          ("last_merge", "LAST_MERGE"), ("k_first", "K_FIRST")]:
        value = options.pop(key, None)
        if value is not None:
            monkeypatch.setenv(f"FLASHATTN_KVC_{variable}", value)
    monkeypatch.setenv("FLASHATTN_KVC_BALANCE", chunk)
    monkeypatch.setenv("FLASHATTN_KVC_CLUSTER", cluster)
    monkeypatch.setenv("FLASHATTN_KVC_PRINT_PLAN", "1")
    options.setdefault("head_dim", 128)
    lengths = ([2100, 0, 333] * batch)[:batch]
    check(device, torch.bfloat16, batch=batch, seqlen_q=seqlen_q, nheads=32, nheads_k=8, seqlen_cache=2100,
          seqlen_new=0, lengths=lengths, page_size=page_size, num_splits=num_splits, causal=True,
          window_size=(1700, 0), **options)
    if device == "cuda":
        assert f"balance_tiles {chunk}," in capfd.readouterr().err


@pytest.mark.parametrize("device", DEVICES)
def test_splits_balanced_by_rule(device, monkeypatch):
    # FLASHATTN_KVC_BALANCE=rule: balanced splits where kvc_balance_tiles says (on an H200, this grid's ten splits
    # merged by the combine kernel on pages of 16; a fixed share each elsewhere).
    monkeypatch.setenv("FLASHATTN_KVC_BALANCE", "rule")
    check(device, torch.bfloat16, batch=3, seqlen_q=1, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=3008,
          seqlen_new=1, lengths=[2990, 17, 1700], page_size=16, causal=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the balanced splits are the GPU kernel's")
@pytest.mark.parametrize("fill", ["ff", "random", 0])
def test_balanced_splits_from_any_workspace_and_replayed(fill, monkeypatch, capfd):
    # The balanced splits' claim counters live in the caller's workspace, which nothing zeroes: whatever it holds, a
    # launch's first claim puts its own tag in place. Then a CUDA graph replayed three times: the capture's tag each
    # time on the same counters, so each replay relies on the last one's final claim having set them back to 0 (a
    # counter left at its end would hand out no tile, and the outputs would be the empty rows' zeros).
    monkeypatch.setenv("FLASHATTN_KVC_BALANCE", "2")
    monkeypatch.setenv("FLASHATTN_KVC_CLUSTER", "0")  # the combine kernel's merge, as the rule's grids take
    torch_allocator = flashattn._ops._allocator_for
    monkeypatch.setattr(flashattn._ops, "_allocator_for", filled_allocator(fill))
    check("cuda", torch.bfloat16, batch=4, seqlen_q=1, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=3000,
          seqlen_new=0, lengths=[3000, 1, 1777, 2900], page_size=16, num_splits=12, causal=True)
    monkeypatch.setattr(flashattn._ops, "_allocator_for", torch_allocator)
    # Replayed: pages of 16 in table order (two producer warps and the claims' ring between them), the combine's merge.
    randn = cuda_randn(23)
    q, k_cache, v_cache = randn(4, 1, 32, 128), randn(4, 3008, 8, 128), randn(4, 3008, 8, 128)
    lengths = [3000, 1, 1777, 2900]
    want_out, want_lse, _, _ = kvcache_ref(q.cpu(), k_cache.cpu(), v_cache.cpu(), None, None, cache_seqlens=lengths,
                                           causal=True)
    same_out = kvcache_ref(q.cpu(), k_cache.cpu(), v_cache.cpu(), None, None, cache_seqlens=lengths, causal=True,
                           dtype=torch.bfloat16)[0]
    k_pages, v_pages = (t.reshape(-1, 16, 8, 128) for t in (k_cache, v_cache))
    table = torch.arange(k_pages.shape[0], dtype=torch.int32, device="cuda").reshape(4, -1)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    monkeypatch.setenv("FLASHATTN_KVC_PRINT_PLAN", "1")
    call = lambda: flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=seqlens, block_table=table, causal=True,
                                           num_splits=12, return_softmax_lse=True)
    call()
    torch.cuda.synchronize()
    plan = capfd.readouterr().err
    assert "balance_tiles 2," in plan and "(merge: combine)" in plan and "one_producer 0" in plan, plan
    monkeypatch.delenv("FLASHATTN_KVC_PRINT_PLAN")
    graph, (static_out, static_lse) = captured(call)
    for _ in poisoned_replays(graph, (static_out, static_lse)):
        assert_close_by_rule(static_out.cpu(), want_out, same_out, "out")
        assert_lse_close(static_lse, want_lse)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits,page_size,seqlen_q", [
    (3, 16, 1), (7, 64, 4), (20, 16, 1), (0, 48, 1), (1, 16, 4), (0, 256, 4)])
def test_paged_splits_without_a_window(device, num_splits, page_size, seqlen_q):
    # Paged split calls with no left window (the windowed ones are above): every split's keys start at the cache's
    # first position whatever the lengths, which a kernel may use to find its first pages before the length is read.
    # Ragged lengths leave splits with no key (one sequence has none before its append), and the append lands inside a
    # page; 20 splits go through the combine, up to 16 merge in a cluster on an H100.
    check(device, torch.bfloat16, batch=3, seqlen_q=seqlen_q, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=1500,
          seqlen_new=1, lengths=[1499, 0, 333], page_size=page_size, num_splits=num_splits, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cluster,page_size", [("", None), ("", 16), ("0", None)])
def test_one_sequence_many_splits(device, cluster, page_size, monkeypatch):
    # Batch 1 x 8 kv heads with a 4k cache: the heuristic's 22 splits, more than a cluster merges, go to the combine
    # kernel (FLASHATTN_KVC_CLUSTER=0 or not).
    monkeypatch.setenv("FLASHATTN_KVC_CLUSTER", cluster)
    check(device, torch.bfloat16, batch=1, seqlen_q=1, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=4100,
          seqlen_new=1, lengths=[4000], page_size=page_size, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("read_once,page_size", [("0", None), ("1", None), ("0", 16), ("1", 16)])
def test_l2_policy_either_way(device, read_once, page_size, monkeypatch):
    # The Hopper kernel's K/V copies carry an evict-first L2 hint on calls of up to 4x the L2's bytes (every call
    # here); FLASHATTN_KVC_READ_ONCE=0 / 1 forces the plain copies / the hint, so both paths are checked.
    monkeypatch.setenv("FLASHATTN_KVC_READ_ONCE", read_once)
    check(device, torch.bfloat16, batch=2, seqlen_q=1, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=700,
          seqlen_new=1, page_size=page_size, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size", [32, 64, 96, 128])
def test_pages_of_one_and_two_pieces(device, page_size):
    # The Hopper kernel copies a 64-key tile of a paged cache in pieces of the longest power of two up to 64 rows
    # that divides the page: one piece a tile from 64 rows up (64, 128), two of 32 rows from pages of 32 and 96 (a
    # page that is no power of two). Ragged lengths end inside pages and tiles, with splits; the second sequence's
    # append (rows 383 and 384) crosses a page's end at every one of these page sizes.
    check(device, torch.bfloat16, batch=3, seqlen_q=1, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=600,
          seqlen_new=2, lengths=[595, 383, 31], page_size=page_size, num_splits=3, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fold", ["0", "1"])
@pytest.mark.parametrize("variable,page_size,dtype", [
    ("FLASHATTN_KVC_V_FOLD", 16, torch.bfloat16), ("FLASHATTN_KVC_V_FOLD", 48, torch.float16),
    ("FLASHATTN_KVC_V_FOLD", 64, torch.bfloat16),
    ("FLASHATTN_KVC_K_FOLD", 16, torch.bfloat16), ("FLASHATTN_KVC_K_FOLD", 32, torch.float16),
    ("FLASHATTN_KVC_K_FOLD", 48, torch.float16), ("FLASHATTN_KVC_K_FOLD", 128, torch.bfloat16),
])
def test_halves_folded_either_way(device, fold, variable, page_size, dtype, monkeypatch):
    # The Hopper kernel copies a paged piece's two 64-column halves at once (one kv head a block, head dim 128; =0
    # keeps one copy a half). V (FLASHATTN_KVC_V_FOLD; pieces of 16 rows or a whole tile): 16-row pieces land as
    # [piece][half][rows], which the P V product and the V tail's zeroing read so. K (FLASHATTN_KVC_K_FOLD; any piece
    # rows): a piece lands as [8-row group][half][rows], which the S product reads with its groups 2 KB apart. The
    # lengths end inside pieces, and the caches are NaN past them: a tail row left unzeroed, or a masked key of a
    # copied piece reaching the output, turns it NaN.
    monkeypatch.setenv(variable, fold)
    monkeypatch.setenv("FLASHATTN_KVC_HEAD_GROUP", "1")
    check(device, dtype, batch=3, seqlen_q=1, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=1000,
          seqlen_new=1, lengths=[990, 417, 5], page_size=page_size, num_splits=2, causal=True,
          nan_past_lengths=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the folded K copies are the GPU kernel's")
@pytest.mark.parametrize("page_size", [16, 64])
def test_k_halves_folded_give_the_same_bits(page_size, monkeypatch):
    # Folding K's halves changes where its rows lie in shared memory, not the S product's sums: the outputs of both
    # layouts are equal to the bit.
    randn = cuda_randn(11)
    pages = 3 * 1024 // page_size
    q, k_cache, v_cache = randn(3, 1, 32, 128), randn(pages, page_size, 8, 128), randn(pages, page_size, 8, 128)
    table = random_block_table(pages, 3, pages // 3, randn.generator).cuda()
    lengths = torch.tensor([1024, 517, 3], dtype=torch.int32, device="cuda")
    monkeypatch.setenv("FLASHATTN_KVC_HEAD_GROUP", "1")
    results = []
    for fold in ("0", "1"):
        monkeypatch.setenv("FLASHATTN_KVC_K_FOLD", fold)
        results.append(flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table,
                                               causal=True, return_softmax_lse=True))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the blocks' placement is the GPU kernel's")
@pytest.mark.parametrize("page_size,num_splits,cluster", [(16, 0, ""), (64, 3, "0"), (None, 0, ""), (16, 4, "")])
def test_placement_clusters_give_the_same_bits(page_size, num_splits, cluster, monkeypatch):
    # The Hopper kernel may launch a sequence's kv heads' blocks as a cluster (FLASHATTN_KVC_PLACE=n: n blocks along
    # the grid's y; unset, its rule), which decides where the blocks run and nothing of what they compute: every
    # placement gives the same bits, with splits merged by the combine kernel (FLASHATTN_KVC_CLUSTER=0; the clusters
    # along y beside the splits along z) or in clusters of their own (no placement clusters then).
    randn = cuda_randn(12)
    batch, nheads_k, capacity = 3, 8, 2048
    lengths = torch.tensor([2048, 1001, 17], dtype=torch.int32, device="cuda")
    q = randn(batch, 1, 32, 128)
    if page_size:
        pages = batch * capacity // page_size
        k_cache, v_cache = randn(pages, page_size, nheads_k, 128), randn(pages, page_size, nheads_k, 128)
        table = random_block_table(pages, batch, pages // batch, randn.generator).cuda()
    else:
        k_cache, v_cache = randn(batch, capacity, nheads_k, 128), randn(batch, capacity, nheads_k, 128)
        table = None
    monkeypatch.setenv("FLASHATTN_KVC_CLUSTER", cluster)
    results = []
    for placed in ("1", "2", "8", ""):
        monkeypatch.setenv("FLASHATTN_KVC_PLACE", placed)
        results.append(flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table,
                                               causal=True, num_splits=num_splits, return_softmax_lse=True))
    for out, lse in results[1:]:
        assert torch.equal(out, results[0][0])
        assert torch.equal(lse, results[0][1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k_first", ["0", "1"])
def test_first_copies_either_way(device, k_first, monkeypatch):
    # The Hopper kernel's two producer warps (paged caches whose blocks read more tiles than the rings hold) issue
    # their first tiles at once (0) or V's first after K's (1, the default; FLASHATTN_KVC_K_FIRST). With 3 splits the
    # blocks read up to 4 tiles (two producer warps); the two short sequences (41 keys after the append, and 1
    # appended to an empty one) leave blocks of one tile and of none, where the barrier must be passed once or never.
    monkeypatch.setenv("FLASHATTN_KVC_K_FIRST", k_first)
    check(device, torch.bfloat16, batch=4, seqlen_q=1, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=704,
          seqlen_new=1, lengths=[690, 40, 0, 333], page_size=16, num_splits=3, causal=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the L2 hint is the GPU kernel's")
def test_l2_policy_gives_the_same_bits(monkeypatch):
    # A cache hint changes where lines go in L2, never a value: the outputs of both forms are equal to the bit.
    randn = cuda_randn(7)
    q, k_cache, v_cache = randn(3, 1, 32, 128), randn(3, 1000, 8, 128), randn(3, 1000, 8, 128)
    lengths = torch.tensor([1000, 517, 3], dtype=torch.int32, device="cuda")
    results = []
    for read_once in ("0", "1"):
        monkeypatch.setenv("FLASHATTN_KVC_READ_ONCE", read_once)
        results.append(flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, causal=True,
                                               return_softmax_lse=True))
    (out0, lse0), (out1, lse1) = results
    assert torch.equal(out0, out1) and torch.equal(lse0, lse1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the splits' plan is the GPU kernels'")
@pytest.mark.parametrize("batch,page_size,seqlen_cache,seqlen_q", [
    (3, 16, 3008, 1), (3, 16, 3008, 4), (3, 64, 3008, 1), (3, None, 3008, 1), (1, 16, 16384, 1)])
def test_repeated_calls_give_the_same_bits(batch, page_size, seqlen_cache, seqlen_q, monkeypatch):
    # The same call on the same inputs gives the same bits every time, with the rule's splits: each split reads a
    # fixed share of its sequence, and their partial results are summed in one order. Splits that take their tiles
    # from a counter they share (FLASHATTN_KVC_BALANCE, asked for only) read other tiles from call to call; the H200's
    # rule once took them on the first case here (ten splits merged by the combine kernel), and every call's bits
    # differed from the one before.
    monkeypatch.delenv("FLASHATTN_KVC_BALANCE", raising=False)
    randn = cuda_randn(5)
    q = randn(batch, seqlen_q, 32, 128)
    table = None
    if page_size:
        pages = seqlen_cache // page_size
        k_cache, v_cache = randn(batch * pages + 3, page_size, 8, 128), randn(batch * pages + 3, page_size, 8, 128)
        table = random_block_table(batch * pages + 3, batch, pages, randn.generator).cuda()
    else:
        k_cache, v_cache = randn(batch, seqlen_cache, 8, 128), randn(batch, seqlen_cache, 8, 128)
    lengths = torch.tensor([seqlen_cache - 10 * b - 3 for b in range(batch)], dtype=torch.int32, device="cuda")
    assert page_size is None or seqlen_cache % page_size == 0  # the lengths within the table's pages
    results = [flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=table, causal=True,
                                       return_softmax_lse=True) for _ in range(4)]
    for out, lse in results[1:]:
        assert torch.equal(out, results[0][0]) and torch.equal(lse, results[0][1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the plan is the GPU kernels'")
def test_plan_printed_on_request(monkeypatch, capfd):
    # FLASHATTN_KVC_PRINT_PLAN=1: each kv-cache launch writes its plan to stderr (the kernel, the split count and how
    # the splits merge); unset, nothing.
    monkeypatch.delenv("FLASHATTN_KVC_LAST_MERGE", raising=False)
    randn = cuda_randn(11)
    q, k_cache, v_cache = randn(2, 1, 32, 128), randn(2, 3000, 8, 128), randn(2, 3000, 8, 128)
    lengths = torch.tensor([3000, 1700], dtype=torch.int32, device="cuda")
    for splits, merge in ((1, "none"), (5, None)):
        monkeypatch.setenv("FLASHATTN_KVC_PRINT_PLAN", "1")
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, causal=True, num_splits=splits)
        torch.cuda.synchronize()
        err = capfd.readouterr().err
        assert err.count("flashattn kv-cache plan:") == 1, err
        assert f"splits {splits} (merge: " in err, err
        if merge:
            assert f"(merge: {merge})" in err, err
        else:
            assert "(merge: cluster)" in err or "(merge: combine)" in err, err
        monkeypatch.delenv("FLASHATTN_KVC_PRINT_PLAN")
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, causal=True, num_splits=splits)
        torch.cuda.synchronize()
        assert "flashattn kv-cache plan:" not in capfd.readouterr().err


@pytest.mark.parametrize("device", DEVICES)
def test_sequences_that_see_no_key(device):
    # Length 0 and nothing appended: out 0 and lse +inf for that sequence; others normal, with splits.
    check(device, torch.float32, batch=3, seqlen_q=2, seqlen_new=0, seqlen_cache=600, lengths=[0, 300, 599],
          num_splits=4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size,seqlen_cache,lengths", [
    (None, 40, [0, 39, 17]),  # dense, shorter than one tile; the cache entries permuted
    (16, 16, [0, 5, 16]),     # a table of one page
    (16, 80, [0, 80, 65]),    # the second tile partly past the table
    (48, 48, [0, 47, 1]),     # pieces of 16 rows in pages of 48
])
def test_sequences_shorter_than_the_copies(device, page_size, seqlen_cache, lengths):
    # The serving shape with sequences of no key or fewer keys than a tile (or two) holds, and block tables shorter
    # than a tile: the copies bring rows past each sequence (or skip them), and those must be masked, never read.
    check(device, torch.bfloat16, batch=3, seqlen_q=1, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=seqlen_cache,
          seqlen_new=0, lengths=lengths, page_size=page_size, permute=page_size is None, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits,options", [(1, {}), (3, {}), (4, dict(window_size=(100, 0)))])
def test_paged_sequence_filling_its_table(device, num_splits, options):
    # Paged, the serving shape: one sequence ends exactly at its block table's span (304 rows, after the append), the
    # others short of it, one empty before its append; splits, and a window whose first tile depends on the length.
    check(device, torch.bfloat16, batch=3, seqlen_q=1, nheads=32, nheads_k=8, head_dim=128, seqlen_cache=300,
          seqlen_new=1, lengths=[303, 250, 0], page_size=16, num_splits=num_splits, causal=True, **options)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size", [None, 16])
def test_head_dim_not_multiple_of_8_is_padded(device, page_size):
    # As FlashAttention: q, k, v and the caches padded with zero columns, the appended rows copied back into the
    # caller's caches, the output cut back to the head dim.
    check(device, torch.float32, batch=2, seqlen_q=3, nheads=4, nheads_k=2, head_dim=20, seqlen_cache=40,
          seqlen_new=3, rotary_dim=8, interleaved=False, causal=True, page_size=page_size)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("head_dim", [40, 96, 256])
def test_head_dims_and_many_query_rows(device, head_dim):
    # More packed rows (seqlen_q x query heads per kv head) than one tile, and head dims padded to a bucket.
    check(device, torch.float16, batch=2, seqlen_q=9, nheads=16, nheads_k=2, head_dim=head_dim, seqlen_cache=300,
          seqlen_new=9, rotary_dim=head_dim // 2 // 8 * 8, causal=True, page_size=None)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seqlen_q", [1, 4, 5])
def test_decode_shapes_window_softcap_splits(device, seqlen_q):
    # The serving shape (32 query heads on 8 kv heads, head dim 128): 4 and 16 packed rows take the kernel whose
    # warps split each key tile, 20 the one whose warps split the rows; a window, softcap and split-KV on top.
    check(device, torch.bfloat16, batch=2, seqlen_q=seqlen_q, nheads=32, nheads_k=8, head_dim=128,
          seqlen_cache=3000, seqlen_new=seqlen_q, lengths=[2900, 1234], window_size=(700, 0), softcap=4.0,
          causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seqlen_q,page_size,rotary_dim", [(1, None, 0), (1, 16, 64), (4, 64, 0)])
def test_more_units_than_resident_blocks_ragged(device, seqlen_q, page_size, rotary_dim):
    # 40 sequences x 8 kv heads: more blocks than an H100 holds at once (two an SM), ragged lengths making them
    # uneven, dense and paged caches, rotary on the queries.
    check(device, torch.bfloat16, batch=40, seqlen_q=seqlen_q, nheads=32, nheads_k=8, head_dim=128,
          seqlen_cache=300, seqlen_new=seqlen_q, page_size=page_size, rotary_dim=rotary_dim, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch,nheads,nheads_k,seqlen_q", [(64, 32, 8, 1), (64, 32, 8, 4), (32, 32, 32, 1),
                                                            (32, 32, 32, 4)])
def test_dense_grouped_by_default_on_a_large_grid(device, batch, nheads, nheads_k, seqlen_q):
    # 64 sequences x 8 kv heads: 512 blocks of one kv head, 256 of two; 32 x 32: 1024 of one, 128 of eight. The
    # default rule groups both on an H100 (kvc_dense_head_group); ragged lengths, no forcing.
    check(device, torch.bfloat16, batch=batch, seqlen_q=seqlen_q, nheads=nheads, nheads_k=nheads_k, head_dim=128,
          seqlen_cache=200, seqlen_new=seqlen_q, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size,seqlen_q,options", [
    (None, 1, dict()),
    (None, 4, dict(num_splits=3, window_size=(70, 0))),
    (None, 1, dict(use_leftpad=True, permute=True, batch_cache=7)),
    (16, 1, dict(num_splits=0)),
    (48, 4, dict(num_splits=2)),
    (256, 1, dict(softcap=3.0)),
])
def test_rows_past_the_lengths_never_read(device, page_size, seqlen_q, options):
    # Every cache row outside the sequences (past a sequence's length after the append, before its left padding, and
    # the entries or pages no sequence holds) is NaN: any that reached a score, a probability or a product would turn
    # the output NaN. Ragged lengths: a cache empty before the append, one ending on a page boundary after it; the
    # default splits and forced ones.
    lengths = [0, 47, 1, 299 - seqlen_q, 16 * 9 - seqlen_q]
    check(device, torch.bfloat16, batch=5, seqlen_q=seqlen_q, nheads=8, nheads_k=2, head_dim=64, seqlen_cache=300,
          seqlen_new=seqlen_q, page_size=page_size, lengths=lengths, causal=True, nan_past_lengths=True, **options)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the many-waves rule is the Hopper kv-cache kernel's; "
                    "the CPU path has no grid")
@pytest.mark.parametrize("page_size,head_dim", [(None, 128), (64, 64), (256, 40)])
def test_many_waves_one_kv_head_split_by_default(page_size, head_dim):
    # 64 sequences x 32 kv heads, one query row: 2048 blocks of one kv head, more than six waves of an H100's resident
    # slots. The default rule takes one kv head a block there and splits a 4100-key cache in two (kvc_many_waves: the
    # split count follows the capacity); ragged lengths (one full, most short: splits that see no key), dense caches
    # and long pages, no forcing.
    lengths = [[4000, 1, 17, 113, 250, 600, 0, 40][i % 8] for i in range(64)]
    check("cuda", torch.bfloat16, batch=64, seqlen_q=1, nheads=32, nheads_k=32, head_dim=head_dim,
          seqlen_cache=4100, seqlen_new=1, page_size=page_size, lengths=lengths, causal=True, nan_past_lengths=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nheads,nheads_k,seqlen_q,page_size,options", [
    (32, 8, 1, 16, dict(num_splits=0)),                       # 4 kv heads a block, one row each of 4 query heads
    (32, 8, 4, 16, dict(window_size=(150, 0), softcap=3.0)),  # 4 x 16 rows: the block's 64 rows full
    (32, 8, 5, 48, dict(alibi_slopes="per_batch_head")),      # 20 rows a kv head: 2 kv heads a block
    (16, 16, 1, 16, dict(num_splits=3)),                      # no GQA: 4 kv heads of one row each
    (12, 6, 2, 16, dict(window_size=(-1, 40), causal=False)), # 6 kv heads: pairs
    (32, 8, 1, 64, dict()),                                   # longer pages, read in 16-row pieces of 4 kv heads
    (32, 8, 5, 256, dict(num_splits=2)),                      # pairs, splits
    # Dense caches, as a cache of 16-row pages: left padding (pieces starting off a multiple of 16), cache_batch_idx.
    (32, 8, 1, None, dict(use_leftpad=True)),
    (32, 8, 4, None, dict(window_size=(150, 0), softcap=3.0, permute=True, batch_cache=5)),
    (32, 8, 5, None, dict(alibi_slopes="per_batch_head")),    # pairs
    (16, 16, 1, None, dict(num_splits=3)),
    (12, 6, 2, None, dict(window_size=(-1, 40), causal=False, rotary_dim=0)),
    # 8 kv heads a block in 8-row pieces (FLASHATTN_KVC_HEAD_GROUP=8): dense, then pages of 16, 64 and 256.
    (32, 8, 1, None, dict(group="8", use_leftpad=True)),
    (32, 32, 2, None, dict(group="8", window_size=(150, 0), softcap=3.0, permute=True, batch_cache=5)),
    (16, 16, 1, None, dict(group="8", num_splits=3, alibi_slopes="per_batch_head")),
    (32, 8, 4, None, dict(group="8")),                        # 8 x 16 rows > 64: 4 kv heads instead
    (32, 8, 1, 16, dict(group="8", num_splits=0)),
    (32, 8, 2, 64, dict(group="8", window_size=(-1, 40), causal=False)),
    (16, 16, 1, 256, dict(group="8", num_splits=2, rotary_dim=0)),
    # The head-dim-64 instance (head dims up to 64; 40 padded to it), 4 and 8 kv heads a block.
    (32, 8, 1, 16, dict(head_dim=64)),
    (32, 32, 1, None, dict(group="8", head_dim=64)),
    (16, 16, 2, 64, dict(group="8", head_dim=40, rotary_dim=16)),
])
def test_several_kv_heads_a_block(device, nheads, nheads_k, seqlen_q, page_size, options, monkeypatch):
    # The Hopper kv-cache kernel takes a 16-row piece of several kv heads in one copy (a page piece, or 16 rows of a
    # dense cache; 8 rows of 8 kv heads), its rows masked to their own kv head's keys; by default only on some grids
    # (kvc_head_group_for_grid for pages of 16 or any odd multiple of 16, kvc_dense_head_group for dense caches and
    # longer pages), so here forced (FLASHATTN_KVC_HEAD_GROUP=max, or =8). Ragged lengths (a partial last piece, a
    # sequence whose cache was empty before the append), an append across pages, rotary, and the masks and score
    # modifiers on top.
    options = dict(options)
    monkeypatch.setenv("FLASHATTN_KVC_HEAD_GROUP", options.pop("group", "max"))
    causal = options.pop("causal", True)
    rotary_dim = options.pop("rotary_dim", 32)
    head_dim = options.pop("head_dim", 128)
    check(device, torch.bfloat16, batch=3, seqlen_q=seqlen_q, nheads=nheads, nheads_k=nheads_k, head_dim=head_dim,
          seqlen_cache=500, seqlen_new=seqlen_q, lengths=[437, 0, 203], page_size=page_size, rotary_dim=rotary_dim,
          interleaved=False, causal=causal, **options)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size,options", [
    (16, dict(num_splits=1)),                                   # 561 pages: one wide window
    (16, dict(num_splits=1, seqlen_cache=20000)),               # 1249 pages: two wide windows, merged
    (32, dict(num_splits=2, seqlen_cache=20000)),               # 312 pages a split: one wide window each
    (16, dict(num_splits=1, seqlen_cache=36000)),               # 2249 pages: three wide windows, merged
    (16, dict(num_splits=1, seqlen_cache=70000)),               # 4375 pages: five wide windows, one after another
    (16, dict(num_splits=1, seqlen_cache=20000, producers="1")),  # merged, one producer warp sorting every window
    (48, dict(num_splits=1, seqlen_cache=60000)),               # merged, 3 pieces a page
    (16, dict(num_splits=1, group="8")),                        # 8 kv heads a block: 8-key tiles, two a page
    (16, dict(num_splits=1, group="8", seqlen_cache=20000)),    # ... merged
    (16, dict(num_splits=3, seqlen_q=4)),                       # splits; four query rows: the last tiles masked
    (48, dict(num_splits=1, window_size=(3000, 0))),            # 3 pieces a page; a window's first tiles masked
    (256, dict(num_splits=2, softcap=5.0)),                     # 4 tiles a page; the range cut to whole pages
    (16, dict(num_splits=1, group="max")),                      # several kv heads a block: one page a tile
    (64, dict(num_splits=1, alibi_slopes="per_batch_head")),    # ALiBi: table order (positions matter)
])
def test_pages_in_address_order(device, page_size, options, monkeypatch):
    # The Hopper kernel reads the pages of a block's unmasked middle tiles in address order, windows of 256 or 1024
    # pages sorted by its producer warps a stage a tile (two to four wide windows sorted whole before the range: each
    # window, then the merge's passes and cleans), here forced (FLASHATTN_KVC_PAGE_ORDER=1: every paged call without
    # ALiBi; by default blocks of one window, or of up to four on grids of more blocks than SMs). Long sequences whose
    # blocks span several windows, the last partial; one producer warp;
    # splits, the masks and a window that leave tiles in table order at either end; pages of several pieces
    # and of several tiles. The caches are NaN outside the sequences: a page read twice or not at all, or one of another
    # sequence, moves the output far past the rule (16 keys of 9000 at least).
    options = dict(options)
    monkeypatch.setenv("FLASHATTN_KVC_PAGE_ORDER", "1")
    if "group" in options:
        monkeypatch.setenv("FLASHATTN_KVC_HEAD_GROUP", options.pop("group"))
    if "producers" in options:
        monkeypatch.setenv("FLASHATTN_KVC_ONE_PRODUCER", "1" if options.pop("producers") == "1" else "0")
    seqlen_q = options.pop("seqlen_q", 1)
    seqlen_cache = options.pop("seqlen_cache", 9000)
    if device == "cpu" and seqlen_cache > 20000:
        pytest.skip("the page order is the GPU kernel's; the shorter cases cover the CPU path's paging")
    check(device, torch.bfloat16, batch=3, seqlen_q=seqlen_q, nheads=32, nheads_k=8, head_dim=128,
          seqlen_cache=seqlen_cache, seqlen_new=seqlen_q, lengths=[seqlen_cache - 10, 4500, 1700], page_size=page_size,
          causal=True, nan_past_lengths=True, **options)
