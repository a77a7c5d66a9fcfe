"""The flash_attn API on CUDA tensors: the GPU kernels against the float64 oracle by the closeness rule (the
same-precision baseline computed on the GPU in the inputs' dtype), gradients, dropout identical to the CPU path,
torch.compile, CUDA graph capture and replay, and non-default streams. Skipped, saying why, without a GPU."""

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
from flashattn import flash_attn_func, flash_attn_qkvpacked_func, flash_attn_varlen_func

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA GPU visible to torch: GPU tests run where one is (scripts/gpu_check.sh)",
)

DEVICE = "cuda"
POISON_BYTES = 256 << 20  # enough to cover every output these tests allocate


def _poison_allocator_cache():
    """Fills memory that torch's caching allocator will hand out next with NaN, so that an output element the
    kernels fail to write shows up as NaN rather than as a plausible stale value."""
    torch.full((POISON_BYTES // 4,), float("nan"), dtype=torch.float32, device=DEVICE)
    torch.cuda.synchronize()


def _check(inputs, ref_kwargs, out, what, varlen=None):
    """out and the gradients of out against the oracle; `varlen` = (cu_seqlens_q, cu_seqlens_k) or None."""
    torch.manual_seed(99)
    dout = torch.randn_like(out)
    _poison_allocator_cache()
    grads = torch.autograd.grad(out, inputs, dout)

    def reference(leaves, dtype):
        if varlen is None:
            return attention_ref(*leaves, dtype=dtype, **ref_kwargs)[0]
        return varlen_attention_ref(*leaves, *varlen, dtype=dtype, **ref_kwargs)[0]

    leaves64 = [t.detach().double().requires_grad_() for t in inputs]
    oracle = reference(leaves64, torch.float64)
    oracle_grads = torch.autograd.grad(oracle, leaves64, dout.double())
    low = [t.detach().clone().requires_grad_() for t in inputs]
    same = reference(low, inputs[0].dtype)
    same_grads = torch.autograd.grad(same, low, dout)
    assert_close_by_rule(out.detach(), oracle, same.detach(), f"{what}: out")
    for name, g, o, s in zip(("dq", "dk", "dv"), grads, oracle_grads, same_grads):
        assert_close_by_rule(g, o, s, f"{what}: {name}")


MODES = [
    ("none", {}),
    ("causal", {"causal": True}),
    ("window", {"window_size": (100, 7)}),
    ("softcap_causal", {"softcap": 5.0, "causal": True}),
    ("alibi", {"alibi": True}),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,mode", MODES, ids=[m[0] for m in MODES])
@pytest.mark.parametrize(
    "batch,seqlen_q,seqlen_k,nheads,nheads_k,head_dim",
    [(2, 1, 1000, 4, 1, 40), (2, 113, 17, 4, 2, 72), (1, 1000, 1000, 2, 2, 128), (2, 17, 2049, 4, 4, 256),
     (1, 512, 113, 6, 2, 64)],
    ids=["q1_k1000_mqa_d40", "q113_k17_gqa_d72", "q1000_d128", "q17_k2049_d256", "q512_k113_gqa3_d64"],
)
def test_dense_forward_backward(batch, seqlen_q, seqlen_k, nheads, nheads_k, head_dim, name, mode, dtype):
    torch.manual_seed(seqlen_q + 7 * seqlen_k + head_dim)
    q, k, v = random_inputs([(batch, seqlen_q, nheads, head_dim), (batch, seqlen_k, nheads_k, head_dim),
                             (batch, seqlen_k, nheads_k, head_dim)], dtype, device=DEVICE)
    opts = dict(mode)
    if opts.pop("alibi", False):
        opts["alibi_slopes"] = alibi_for(nheads, batch).to(DEVICE)
    _poison_allocator_cache()
    out = flash_attn_func(q, k, v, **opts)
    _check([q, k, v], opts, out, f"{name}/{dtype}/d{head_dim}")


@pytest.mark.parametrize("seqlen_q", [1, 4])
def test_decode_shaped_forward(seqlen_q):
    """A few query rows of 32 heads on 8 kv heads against 4099 keys: the forward packs the query heads of a kv head
    and splits the keys (the scratch memory for the splits comes from torch's allocator)."""
    torch.manual_seed(41 + seqlen_q)
    q, k, v = random_inputs([(2, seqlen_q, 32, 128), (2, 4099, 8, 128), (2, 4099, 8, 128)], torch.bfloat16,
                            device=DEVICE)
    _poison_allocator_cache()
    out = flash_attn_func(q, k, v, causal=True)
    _check([q, k, v], {"causal": True}, out, f"decode-shaped/q{seqlen_q}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_varlen_ragged(dtype):
    torch.manual_seed(11)
    lengths_q, lengths_k = [1, 17, 113, 0, 1000, 64], [1000, 17, 1, 9, 1000, 300]
    cu_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    q, k, v = random_inputs([(sum(lengths_q), 4, 72), (sum(lengths_k), 2, 72), (sum(lengths_k), 2, 72)], dtype,
                            device=DEVICE)
    _poison_allocator_cache()
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=True)
    _check([q, k, v], {"causal": True}, out, f"varlen/{dtype}", varlen=(cu_q.cpu(), cu_k.cpu()))


def test_dropout_mask_matches_cpu_path():
    torch.manual_seed(12)
    q, k, v = (torch.randn(2, 65, 4, 64, dtype=torch.bfloat16) for _ in range(3))
    torch.manual_seed(5)
    out_cpu, _, s_cpu = flash_attn_func(q, k, v, dropout_p=0.3, causal=True, return_attn_probs=True)
    torch.manual_seed(5)
    out_gpu, _, s_gpu = flash_attn_func(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), dropout_p=0.3, causal=True,
                                        return_attn_probs=True)
    assert torch.equal(kept(s_gpu.cpu()), kept(s_cpu))


def test_dropout_gradients():
    torch.manual_seed(13)
    q, k, v = random_inputs([(2, 129, 4, 64), (2, 257, 2, 64), (2, 257, 2, 64)], torch.bfloat16, device=DEVICE)
    out, _, s_dmask = flash_attn_func(q, k, v, dropout_p=0.2, return_attn_probs=True)
    _check([q, k, v], {"keep": kept(s_dmask), "dropout_p": 0.2}, out, "dropout")


def test_deterministic_backward_bit_identical():
    torch.manual_seed(14)
    q, k, v = random_inputs([(2, 700, 8, 128), (2, 700, 2, 128), (2, 700, 2, 128)], torch.bfloat16, device=DEVICE)
    assert_backward_deterministic(flash_attn_func(q, k, v, causal=True, deterministic=True), (q, k, v))


def test_torch_compile_fullgraph_inductor():
    def block(q, k, v):
        return flash_attn_func(q * 2.0, k, v, causal=True).float().square().mean()

    torch.manual_seed(15)
    inputs = random_inputs([(2, 300, 4, 64), (2, 300, 4, 64), (2, 300, 4, 64)], torch.bfloat16, device=DEVICE)
    eager = block(*inputs)
    eager_grads = torch.autograd.grad(eager, inputs)
    compiled = torch.compile(block, fullgraph=True)
    got = compiled(*inputs)
    grads = torch.autograd.grad(got, inputs)
    assert torch.allclose(got, eager, rtol=1e-3)
    for g, e in zip(grads, eager_grads):
        assert torch.allclose(g.float(), e.float(), atol=1e-3, rtol=1e-2)


def test_cuda_graph_capture_and_replay():
    torch.manual_seed(16)
    static = [torch.randn(2, 257, 4, 64, dtype=torch.bfloat16, device=DEVICE) for _ in range(3)]
    for t in static:
        t.requires_grad_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as torch's graph capture recipe asks
        for _ in range(2):
            out = flash_attn_func(*static, causal=True)
            torch.autograd.grad(out.float().sum(), static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = flash_attn_func(*static, causal=True)
        static_grads = torch.autograd.grad(static_out.float().sum(), static)
    for _ in range(2):
        fresh = [torch.randn_like(t) for t in static]
        with torch.no_grad():
            for s, f in zip(static, fresh):
                s.copy_(f)
        graph.replay()
        leaves = [f.detach().requires_grad_() for f in fresh]
        expected = flash_attn_func(*leaves, causal=True)
        expected_grads = torch.autograd.grad(expected.float().sum(), leaves)
        assert torch.equal(static_out, expected)
        for g, e in zip(static_grads, expected_grads):
            assert torch.equal(g, e)


def test_non_default_stream():
    torch.manual_seed(17)
    q, k, v = (torch.randn(4, 1000, 8, 128, dtype=torch.float16, device=DEVICE) for _ in range(3))
    expected = flash_attn_func(q, k, v, causal=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = flash_attn_func(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(got, expected)


def test_qkvpacked_on_gpu():
    torch.manual_seed(18)
    qkv = torch.randn(2, 333, 3, 4, 96, dtype=torch.bfloat16, device=DEVICE, requires_grad=True)
    out = flash_attn_qkvpacked_func(qkv, window_size=(50, 50))
    q, k, v = (t.detach().requires_grad_() for t in qkv.unbind(2))
    _check([q, k, v], {"window_size": (50, 50)}, flash_attn_func(q, k, v, window_size=(50, 50)), "qkvpacked")
    assert torch.equal(out, flash_attn_func(*(t.detach() for t in qkv.unbind(2)), window_size=(50, 50)))


def test_device_mismatch_and_fp32_are_refused():
    q = torch.randn(1, 8, 2, 64, device=DEVICE, dtype=torch.float16)
    with pytest.raises(flashattn.Error, match="^k: "):
        flash_attn_func(q, q.cpu(), q)
    with pytest.raises(flashattn.Error, match="float16|bfloat16"):
        flash_attn_func(q.float(), q.float(), q.float())
