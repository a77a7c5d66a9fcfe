"""The torch integration: the custom operators pass torch's own checks (schema, fake tensors, autograd
registration), torch.compile(fullgraph=True) traces through them, and they run on CPU tensors."""

import pytest
import torch

import flashattn
from attention_reference import random_inputs
from flashattn import _ops, flash_attn_func, flash_attn_varlen_func


def _sample_dense(dtype=torch.float32, requires_grad=True):
    torch.manual_seed(0)
    q, k, v = random_inputs([(2, 9, 4, 16), (2, 13, 2, 16), (2, 13, 2, 16)], dtype, requires_grad=requires_grad)
    return q, k, v


def test_operators_are_registered():
    for name in ("fwd", "bwd", "varlen_fwd", "varlen_bwd"):
        assert hasattr(torch.ops.flashattn, name)


@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
def test_opcheck_dense(dropout_p):
    q, k, v = _sample_dense()
    args = (q, k, v, dropout_p, 0.25, True, -1, -1, 0.0, None, False, dropout_p > 0, _ops.draw_seed(dropout_p))
    # The dropout seed is an input (drawn by the caller), so even with dropout the operator is a function of its
    # inputs and every check applies.
    torch.library.opcheck(_ops.fwd, args)
    out, lse, _, rng_state = _ops.fwd(*args)
    dout = torch.randn_like(out)
    bwd_args = (dout, q.detach(), k.detach(), v.detach(), out.detach(), lse, dropout_p, 0.25, True, -1, -1, 0.0,
                None, False, rng_state)
    torch.library.opcheck(_ops.bwd, bwd_args, test_utils=["test_schema", "test_faketensor"])


def test_opcheck_varlen():
    torch.manual_seed(1)
    cu = torch.tensor([0, 3, 20], dtype=torch.int32)
    q, k, v = random_inputs([(20, 4, 16), (20, 2, 16), (20, 2, 16)], torch.float32)
    args = (q, k, v, cu, cu, None, 17, 17, 0.0, 0.25, False, 4, 4, 0.0, None, False, False, _ops.draw_seed(0.0))
    torch.library.opcheck(_ops.varlen_fwd, args)


def _compiled_matches_eager(fn, backend, inputs):
    eager_out = fn(*inputs)
    eager_grads = torch.autograd.grad(eager_out.sum(), inputs)
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    out = compiled(*inputs)
    grads = torch.autograd.grad(out.sum(), inputs)
    assert torch.allclose(out, eager_out, atol=1e-6, rtol=0)
    for g, e in zip(grads, eager_grads):
        assert torch.allclose(g, e, atol=1e-6, rtol=0)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph_dense(backend):
    def attention_block(q, k, v):
        # Work around the op, so the graph has something besides it.
        return flash_attn_func(q * 1.5, k, v.relu(), causal=True, window_size=(6, -1), softcap=3.0) * 2.0

    _compiled_matches_eager(attention_block, backend, list(_sample_dense()))


def test_torch_compile_fullgraph_varlen_and_head_dim_padding():
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)

    def attention_block(q, k, v):
        return flash_attn_varlen_func(q, k, v, cu, cu, 7, 7, causal=True)

    torch.manual_seed(2)
    inputs = random_inputs([(12, 2, 20), (12, 2, 20), (12, 2, 20)], torch.float32)  # head dim 20: padded to 24
    _compiled_matches_eager(attention_block, "aot_eager", inputs)


def test_torch_compile_fullgraph_with_return_attn_probs_and_dropout():
    def attention_block(q, k, v):
        out, lse, s_dmask = flash_attn_func(q, k, v, dropout_p=0.2, return_attn_probs=True)
        return out, lse, s_dmask

    q, k, v = _sample_dense(requires_grad=False)
    compiled = torch.compile(attention_block, fullgraph=True, backend="aot_eager")
    out, lse, s_dmask = compiled(q, k, v)
    assert out.shape == q.shape and lse.shape == (2, 4, 9) and s_dmask.shape == (2, 4, 9, 13)


def test_module_with_flashattn_trains():
    torch.manual_seed(3)

    class Block(torch.nn.Module):
        def __init__(self, width=32, nheads=2):
            super().__init__()
            self.nheads = nheads
            self.qkv = torch.nn.Linear(width, 3 * width)
            self.proj = torch.nn.Linear(width, width)

        def forward(self, x):
            b, s, w = x.shape
            qkv = self.qkv(x).view(b, s, 3, self.nheads, w // self.nheads)
            return self.proj(flashattn.flash_attn_qkvpacked_func(qkv, causal=True).reshape(b, s, w))

    block = Block()
    optimizer = torch.optim.SGD(block.parameters(), lr=0.1)
    x, target = torch.randn(2, 11, 32), torch.randn(2, 11, 32)
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.mse_loss(block(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


# ---- the eager route: plain tensors skip torch's operator dispatch, with the same results -------------------------


def _forbid_operators(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the operator was dispatched on the eager route")

    for name in ("fwd", "bwd", "varlen_fwd", "varlen_bwd", "kvcache_fwd", "merge"):
        monkeypatch.setattr(_ops, name, refuse)


@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_eager_route_matches_the_operators_with_gradients(monkeypatch, dropout_p):
    q, k, v = _sample_dense()
    args = (q, k, v, dropout_p, 0.25, True, 2, 0, 0.0, None, False, False)
    torch.manual_seed(5)
    out_op, lse_op, _, _ = _ops.fwd(*args, _ops.draw_seed(dropout_p))
    dout = torch.randn_like(out_op)
    grads_op = torch.autograd.grad(out_op, (q, k, v), dout)

    _forbid_operators(monkeypatch)
    torch.manual_seed(5)  # the same dropout seed is drawn
    out, lse, _, _ = _ops.call_fwd(*args)
    assert out.requires_grad and not lse.requires_grad
    grads = torch.autograd.grad(out, (q, k, v), dout)
    torch.testing.assert_close(out, out_op, rtol=0, atol=0)
    torch.testing.assert_close(lse, lse_op, rtol=0, atol=0)
    for g, g_op in zip(grads, grads_op):
        torch.testing.assert_close(g, g_op, rtol=0, atol=0)


def test_eager_route_varlen_with_gradients(monkeypatch):
    torch.manual_seed(1)
    q, k, v = random_inputs([(10, 4, 16), (12, 2, 16), (12, 2, 16)], torch.float32, requires_grad=True)
    cu_q, cu_k = torch.tensor([0, 3, 10], dtype=torch.int32), torch.tensor([0, 7, 12], dtype=torch.int32)
    out_op = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 7, 7, causal=True)
    dout = torch.randn_like(out_op)
    grads_op = torch.autograd.grad(out_op, (q, k, v), dout)
    out_op_route = _ops.varlen_fwd(q, k, v, cu_q, cu_k, None, 7, 7, 0.0, 0.25, True, -1, 0, 0.0, None, False,
                                   False, _ops.draw_seed(0.0))[0]
    _forbid_operators(monkeypatch)
    out = _ops.call_varlen_fwd(q, k, v, cu_q, cu_k, None, 7, 7, 0.0, 0.25, True, -1, 0, 0.0, None, False, False)[0]
    torch.testing.assert_close(out, out_op_route, rtol=0, atol=0)
    torch.testing.assert_close(flash_attn_varlen_func(q, k, v, cu_q, cu_k, 7, 7, causal=True), out_op, rtol=0,
                               atol=0)
    grads = torch.autograd.grad(flash_attn_varlen_func(q, k, v, cu_q, cu_k, 7, 7, causal=True), (q, k, v), dout)
    for g, g_op in zip(grads, grads_op):
        torch.testing.assert_close(g, g_op, rtol=0, atol=0)


def test_eager_route_without_grad_and_for_the_kv_cache(monkeypatch):
    _forbid_operators(monkeypatch)
    q, k, v = _sample_dense(requires_grad=False)
    with torch.no_grad():
        assert flash_attn_func(q, k, v, causal=True).shape == q.shape
    k_cache, v_cache = torch.randn(2, 20, 2, 16), torch.randn(2, 20, 2, 16)
    versions = (k_cache._version, v_cache._version)
    out = flashattn.flash_attn_with_kvcache(q[:, :1], k_cache, v_cache, k[:, :1], v[:, :1],
                                            cache_seqlens=torch.tensor([3, 9], dtype=torch.int32), causal=True)
    assert out.shape == q[:, :1].shape
    torch.testing.assert_close(k_cache[0, 3], k[0, 0], rtol=0, atol=0)  # appended at each row's cache_seqlens
    torch.testing.assert_close(v_cache[1, 9], v[1, 0], rtol=0, atol=0)
    assert k_cache._version > versions[0] and v_cache._version > versions[1]  # the in-place write is visible


def test_traced_calls_take_the_operators():
    # Under a dispatch mode (here torch's fake tensors) the registered operators, with their fakes, run.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k, v = torch.empty(2, 9, 4, 16), torch.empty(2, 13, 2, 16), torch.empty(2, 13, 2, 16)
        assert not _ops._eager(q, k, v)
        out = flash_attn_func(q, k, v)
    assert out.shape == (2, 9, 4, 16)


def test_meta_tensors_take_the_operators():
    # Meta tensors (shape probing, meta-device initialisation) cannot go through DLPack: the operators' fakes run.
    q, k, v = (torch.empty(2, 9, 4, 16, device="meta"), torch.empty(2, 13, 2, 16, device="meta"),
               torch.empty(2, 13, 2, 16, device="meta"))
    assert not _ops._eager(q, k, v)
    out = flash_attn_func(q, k, v)
    assert out.shape == (2, 9, 4, 16) and out.device.type == "meta"


def test_dropout_under_compile_with_checkpointing_keeps_the_forwards_mask():
    # The seed is drawn outside the operator, so a compiled, checkpointed call replays it in the recomputation: the
    # gradients are those of the same call without checkpointing.
    from torch.utils.checkpoint import checkpoint

    q, k, v = _sample_dense()

    def attn(q, k, v):
        return flash_attn_func(q, k, v, dropout_p=0.5)

    plain = torch.compile(attn, backend="aot_eager", fullgraph=True)
    checkpointed = torch.compile(lambda q, k, v: checkpoint(attn, q, k, v, use_reentrant=False), backend="aot_eager")
    torch.manual_seed(11)
    grads = torch.autograd.grad(plain(q, k, v).sum(), (q, k, v))
    torch.manual_seed(11)
    grads_ckpt = torch.autograd.grad(checkpointed(q, k, v).sum(), (q, k, v))
    for g, g_ckpt in zip(grads, grads_ckpt):
        torch.testing.assert_close(g_ckpt, g, rtol=0, atol=0)
