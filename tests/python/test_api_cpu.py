"""The flash_attn API on CPU tensors (flashattn's exact reference path) against a straightforward torch
implementation: every argument, the packed and varlen variants, GQA, dropout, and gradients through autograd."""

import math

import pytest
import torch

import flashattn
from attention_reference import (
    alibi_for,
    assert_backward_deterministic,
    assert_close_by_rule,
    attention_ref,
    kept,
    random_inputs,
    varlen_attention_ref,
)
from flashattn import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
)

LOW_PRECISION = [torch.float16, torch.bfloat16]

# (name, keyword arguments of flash_attn_func); alibi slopes are filled in per test, they depend on the shape.
MASK_MODES = [
    ("none", {}),
    ("causal", {"causal": True}),
    ("window", {"window_size": (7, 3)}),
    ("window_left_causal", {"causal": True, "window_size": (5, -1)}),
    ("softcap", {"softcap": 2.5}),
    ("alibi", {"alibi": "per_head"}),
    ("alibi_batch_causal", {"alibi": "per_batch_head", "causal": True}),
    ("scale", {"softmax_scale": 0.3}),
]


def _options(mode, batch, nheads):
    opts = dict(mode)
    alibi = opts.pop("alibi", None)
    if alibi == "per_head":
        opts["alibi_slopes"] = alibi_for(nheads)
    elif alibi == "per_batch_head":
        opts["alibi_slopes"] = alibi_for(nheads, batch)
    return opts


def _check_forward_and_grads(ours, inputs, ref_kwargs, what, check_lse=None):
    """Compares flashattn's output and its gradients through autograd with the oracle, by the closeness rule."""
    out = ours
    torch.manual_seed(1234)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, inputs, dout)
    leaves64 = [t.detach().double().requires_grad_() for t in inputs]
    oracle, lse64 = attention_ref(*leaves64, **ref_kwargs)
    oracle_grads = torch.autograd.grad(oracle, leaves64, dout.double())
    lowp_leaves = [t.detach().clone().requires_grad_() for t in inputs]
    dtype = inputs[0].dtype
    same, _ = attention_ref(*lowp_leaves, dtype=dtype, **ref_kwargs)
    same_grads = torch.autograd.grad(same, lowp_leaves, dout)
    assert_close_by_rule(out.detach(), oracle, same.detach(), f"{what}: out")
    for name, g, o, s in zip(("dq", "dk", "dv"), grads, oracle_grads, same_grads):
        assert_close_by_rule(g, o, s, f"{what}: {name}")
    if check_lse is not None:
        finite = torch.isfinite(lse64)
        assert torch.equal(torch.isfinite(check_lse), finite)
        assert (check_lse[finite].double() - lse64[finite]).abs().max().item() < 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, *LOW_PRECISION], ids=str)
@pytest.mark.parametrize("name,mode", MASK_MODES, ids=[m[0] for m in MASK_MODES])
@pytest.mark.parametrize(
    "batch,seqlen_q,seqlen_k,nheads,nheads_k,head_dim",
    [(2, 17, 113, 4, 2, 40), (1, 113, 17, 4, 1, 72), (2, 1, 33, 2, 2, 64), (1, 64, 64, 6, 3, 8)],
    ids=["q17_k113_gqa2_d40", "q113_k17_mqa_d72", "q1_k33_d64", "q64_k64_gqa2_d8"],
)
def test_forward_and_backward_match_reference(batch, seqlen_q, seqlen_k, nheads, nheads_k, head_dim, name, mode,
                                               dtype):
    torch.manual_seed(seqlen_q * 1000 + seqlen_k)
    q, k, v = random_inputs([(batch, seqlen_q, nheads, head_dim), (batch, seqlen_k, nheads_k, head_dim),
                             (batch, seqlen_k, nheads_k, head_dim)], dtype)
    opts = _options(mode, batch, nheads)
    out, lse, s_dmask = flash_attn_func(q, k, v, return_attn_probs=True, **opts)
    assert out.dtype == dtype and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == (batch, nheads, seqlen_q)
    assert s_dmask is None  # only with dropout, as flash_attn
    _check_forward_and_grads(out, [q, k, v], opts, f"{name}/{dtype}", check_lse=lse)


def test_head_dim_not_multiple_of_8_is_padded():
    torch.manual_seed(0)
    q, k, v = random_inputs([(2, 19, 3, 36), (2, 23, 3, 36), (2, 23, 3, 36)], torch.float32)
    out = flash_attn_func(q, k, v, causal=True)
    assert out.shape == (2, 19, 3, 36)
    _check_forward_and_grads(out, [q, k, v], {"causal": True}, "head_dim 36")


def test_strided_inputs():
    torch.manual_seed(1)
    base = torch.randn(2, 4, 29, 64, dtype=torch.float32)
    q = base.transpose(1, 2).requires_grad_()  # (2, 29, 4, 64), last dim contiguous, heads strided
    k, v = random_inputs([(2, 31, 4, 64), (2, 31, 4, 64)], torch.float32)
    k_t = k.transpose(-1, -2).contiguous().transpose(-1, -2)  # last dim not contiguous: flashattn makes it so
    out = flash_attn_func(q, k_t, v)
    _check_forward_and_grads(out, [q, k_t, v], {}, "strided")


def test_qkvpacked_matches_unpacked_and_gradients_reach_qkv():
    torch.manual_seed(2)
    qkv = torch.randn(2, 37, 3, 4, 32, dtype=torch.float32, requires_grad=True)
    out = flash_attn_qkvpacked_func(qkv, causal=True, window_size=(9, 0))
    q, k, v = (t.detach().requires_grad_() for t in qkv.unbind(2))
    expected = flash_attn_func(q, k, v, causal=True, window_size=(9, 0))
    assert torch.equal(out, expected)
    dout = torch.randn_like(out)
    (dqkv,) = torch.autograd.grad(out, qkv, dout)
    dq, dk, dv = torch.autograd.grad(expected, (q, k, v), dout)
    assert torch.equal(dqkv, torch.stack([dq, dk, dv], dim=2))


def test_kvpacked_matches_unpacked_with_gqa():
    torch.manual_seed(3)
    q = torch.randn(2, 21, 6, 48, requires_grad=True)
    kv = torch.randn(2, 40, 2, 2, 48, requires_grad=True)
    out, lse, _ = flash_attn_kvpacked_func(q, kv, softcap=4.0, return_attn_probs=True)
    k, v = (t.detach().requires_grad_() for t in kv.unbind(2))
    q2 = q.detach().requires_grad_()
    expected = flash_attn_func(q2, k, v, softcap=4.0)
    assert torch.equal(out, expected)
    dout = torch.randn_like(out)
    dq, dkv = torch.autograd.grad(out, (q, kv), dout)
    dq2, dk, dv = torch.autograd.grad(expected, (q2, k, v), dout)
    assert torch.equal(dq, dq2) and torch.equal(dkv, torch.stack([dk, dv], dim=2))


def _ragged(lengths):
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lengths, dtype=torch.int32).cumsum(0)
    return cu, max(lengths)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,mode", MASK_MODES, ids=[m[0] for m in MASK_MODES])
def test_varlen_matches_reference(name, mode, dtype):
    torch.manual_seed(4)
    lengths_q, lengths_k = [1, 17, 0, 45, 9], [5, 17, 3, 30, 60]
    cu_q, max_q = _ragged(lengths_q)
    cu_k, max_k = _ragged(lengths_k)
    nheads, nheads_k, head_dim = 4, 2, 40
    q, k, v = random_inputs([(sum(lengths_q), nheads, head_dim), (sum(lengths_k), nheads_k, head_dim),
                             (sum(lengths_k), nheads_k, head_dim)], dtype)
    opts = _options(mode, len(lengths_q), nheads)
    out, lse, _ = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, return_attn_probs=True, **opts)
    assert lse.shape == (nheads, sum(lengths_q)) and lse.dtype == torch.float32
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    leaves64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    oracle, lse64 = varlen_attention_ref(*leaves64, cu_q, cu_k, **opts)
    oracle_grads = torch.autograd.grad(oracle, leaves64, dout.double())
    low = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    same, _ = varlen_attention_ref(*low, cu_q, cu_k, dtype=dtype, **opts)
    same_grads = torch.autograd.grad(same, low, dout)
    assert_close_by_rule(out.detach(), oracle, same.detach(), f"varlen {name}: out")
    for g, o, s, n in zip(grads, oracle_grads, same_grads, ("dq", "dk", "dv")):
        assert_close_by_rule(g, o, s, f"varlen {name}: {n}")
    finite = torch.isfinite(lse64)
    assert torch.equal(torch.isfinite(lse), finite)


def test_varlen_packed_variants_match_varlen_func():
    torch.manual_seed(5)
    cu, max_len = _ragged([3, 28, 11])
    qkv = torch.randn(42, 3, 4, 32, requires_grad=True)
    out = flash_attn_varlen_qkvpacked_func(qkv, cu, max_len, causal=True)
    q, k, v = qkv.unbind(1)
    assert torch.equal(out, flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=True))
    (dqkv,) = torch.autograd.grad(out.sum(), qkv)
    assert dqkv.shape == qkv.shape and torch.isfinite(dqkv).all()

    q = torch.randn(42, 4, 32, requires_grad=True)
    kv = torch.randn(42, 2, 1, 32, requires_grad=True)
    out = flash_attn_varlen_kvpacked_func(q, kv, cu, cu, max_len, max_len, window_size=(4, 4))
    k, v = kv.unbind(1)
    assert torch.equal(out, flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, window_size=(4, 4)))
    dq, dkv = torch.autograd.grad(out.sum(), (q, kv))
    assert dkv.shape == kv.shape


@pytest.mark.parametrize("dropout_p", [0.17, 0.5])
def test_dropout_mask_output_and_gradients(dropout_p):
    torch.manual_seed(6)
    batch, seqlen_q, seqlen_k, nheads, head_dim = 2, 33, 65, 4, 32
    q, k, v = random_inputs([(batch, seqlen_q, nheads, head_dim), (batch, seqlen_k, 2, head_dim),
                             (batch, seqlen_k, 2, head_dim)], torch.float32)
    out, lse, s_dmask = flash_attn_func(q, k, v, dropout_p=dropout_p, causal=True, return_attn_probs=True)
    assert s_dmask.shape == (batch, nheads, seqlen_q, seqlen_k) and s_dmask.dtype == torch.float32
    keep = kept(s_dmask)
    # The drop rate over the unmasked entries is close to p (the mask is a hash: a loose statistical bound).
    visible = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool).tril(seqlen_k - seqlen_q).expand_as(keep)
    rate = 1.0 - keep[visible].float().mean().item()
    assert abs(rate - dropout_p) < 0.03
    ref_kwargs = {"causal": True, "keep": keep, "dropout_p": dropout_p}
    _check_forward_and_grads(out, [q, k, v], ref_kwargs, f"dropout {dropout_p}")


def test_dropout_is_reproducible_with_torch_manual_seed():
    q, k, v = (torch.randn(1, 16, 2, 16) for _ in range(3))
    torch.manual_seed(7)
    a = flash_attn_func(q, k, v, dropout_p=0.3)
    torch.manual_seed(7)
    b = flash_attn_func(q, k, v, dropout_p=0.3)
    c = flash_attn_func(q, k, v, dropout_p=0.3)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_deterministic_backward_is_bit_identical():
    torch.manual_seed(8)
    q, k, v = random_inputs([(2, 50, 4, 64), (2, 70, 2, 64), (2, 70, 2, 64)], torch.bfloat16)
    assert_backward_deterministic(flash_attn_func(q, k, v, causal=True, deterministic=True), (q, k, v))


def test_return_conventions():
    q, k, v = (torch.randn(1, 8, 2, 16) for _ in range(3))
    assert isinstance(flash_attn_func(q, k, v), torch.Tensor)
    out, lse, s_dmask = flash_attn_func(q, k, v, return_attn_probs=True)
    assert s_dmask is None and lse.shape == (1, 2, 8)
    out, lse, s_dmask = flash_attn_func(q, k, v, dropout_p=0.1, return_attn_probs=True)
    assert s_dmask.shape == (1, 2, 8, 8)


def test_rows_that_see_no_key():
    # A window of 0 to the left and right of the bottom-right diagonal with seqlen_q > seqlen_k: the first rows
    # see nothing; their output is 0 and their lse +inf (flash_attn's convention).
    q, k, v = random_inputs([(1, 10, 2, 16), (1, 4, 2, 16), (1, 4, 2, 16)], torch.float32)
    out, lse, _ = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert torch.all(out[0, :6] == 0) and torch.all(torch.isposinf(lse[0, :, :6]))
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)


def test_zero_softmax_scale_is_a_scale():
    # As in flash_attn: 0.0 is the scale itself (every key weighs the same), None is 1 / sqrt(headdim).
    q, k, v = random_inputs([(2, 5, 2, 16), (2, 7, 2, 16), (2, 7, 2, 16)], torch.float64)
    out, lse, _ = flash_attn_func(q, k, v, softmax_scale=0.0, return_attn_probs=True)
    torch.testing.assert_close(out, v.mean(dim=1, keepdim=True).expand_as(out))
    torch.testing.assert_close(lse, torch.full_like(lse, math.log(7)))
    dq, dk = torch.autograd.grad(out.sum(), (q, k))
    assert torch.all(dq == 0) and torch.all(dk == 0)
    default = flash_attn_func(q, k, v)
    torch.testing.assert_close(default, flash_attn_func(q, k, v, softmax_scale=16 ** -0.5))


def test_empty_batch_and_sequences():
    q, k, v = (torch.randn(0, 8, 2, 16) for _ in range(3))
    assert flash_attn_func(q, k, v).shape == (0, 8, 2, 16)
    q = torch.randn(1, 0, 2, 16, requires_grad=True)
    k, v = (torch.randn(1, 5, 2, 16, requires_grad=True) for _ in range(2))
    out = flash_attn_func(q, k, v)
    assert out.shape == (1, 0, 2, 16)
    dk = torch.autograd.grad(out.sum(), k, allow_unused=True)[0]
    assert dk is None or torch.all(dk == 0)


def test_error_type_is_exported():
    assert issubclass(flashattn.Error, RuntimeError)
