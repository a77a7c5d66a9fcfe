"""flashattn's torch operators: forward and backward as separate custom ops, with fake (meta) implementations for
torch.compile and an autograd formula that connects them.

The operators allocate their outputs and scratch memory through torch (so the caching allocator and CUDA graph
pools are used), take the stream torch is using, and hand tensors to the C++ API through DLPack. Tensors on the
CPU run the exact reference implementation.

Dropout: each forward call draws a 64-bit seed from torch's default generator (so torch.manual_seed reproduces it)
before calling the operator, which takes it as an input (draw_seed: traced by torch.compile, so a checkpointed
recomputation replays it) and returns it, with the Philox offset, as `rng_state`, a CPU int64 tensor of two
elements; the backward regenerates the same mask from it. Under CUDA graph capture the seed drawn at capture time
is baked into the graph, so every replay applies the same dropout mask.

Two routes to the same implementations. Eager calls on plain tensors (no torch.compile tracing, no dispatch mode,
no functorch transform) skip torch's operator dispatch: the implementation is called directly, under a
torch.autograd.Function where gradients are needed. Dispatch through a Python custom op costs tens of microseconds
a call, which a short kernel (decode, short sequences) would otherwise spend waiting. Everything else (tracing,
fake tensors, opcheck) goes through the registered operators. `call_*` picks the route.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from ._ext import load

_C = load()
Error = _C.Error

_SEED_BOUND = 2**62  # seeds are drawn in [0, 2^62): any value is valid, this keeps them positive int64


def _stream_of(t: Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _allocator_for(t: Tensor):
    """The extension's scratch allocator for calls on t's device: torch's caching allocator, handed over as a DLPack
    capsule (_d below)."""
    if not t.is_cuda:
        return None
    device = t.device
    return lambda nbytes: _d(torch.empty(nbytes, dtype=torch.uint8, device=device))


try:
    from torch.utils.dlpack import to_dlpack as _to_dlpack  # one C call; Tensor.__dlpack__ is Python, ~3 us a tensor
except ImportError:  # pragma: no cover - every torch >= 2.4 has it
    _to_dlpack = None


def _d(t: Optional[Tensor]):
    """A tensor as the extension takes it: a DLPack capsule. The operators run below autograd, so a tensor that
    requires grad is handed over as it is (Tensor.__dlpack__ would refuse it; to_dlpack does not look)."""
    if t is None:
        return None
    return _to_dlpack(t) if _to_dlpack is not None else t.detach()


def _last_dim_contiguous(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def draw_seed(dropout_p: float) -> Tensor:
    """The dropout seed of one forward call, drawn by the caller of the operator (a CPU int64 scalar; 0 without
    dropout). Drawn outside the operator so that torch.compile traces the draw: a recomputation (activation
    checkpointing) replays the same seed and the backward sees the forward's mask, and two dropout calls are never
    merged into one."""
    if dropout_p > 0.0:
        return torch.randint(0, _SEED_BOUND, (), dtype=torch.int64)
    return torch.zeros((), dtype=torch.int64)  # made per call, so that under a fake-tensor mode it is fake too


def _rng_state_of(rng_seed: Tensor, dropout_p: float) -> Tensor:
    return torch.tensor([int(rng_seed) if dropout_p > 0.0 else 0, 0], dtype=torch.int64)


def _rng_state_like() -> Tensor:
    return torch.empty(2, dtype=torch.int64, device="cpu")


def _dense_outputs(q: Tensor, k: Tensor, v: Tensor, return_probs: bool):
    """The forward's (out, softmax_lse, attn_probs), allocated: the operator's and its fake's."""
    batch, seqlen_q, nheads, _ = q.shape
    out = q.new_empty(batch, seqlen_q, nheads, v.shape[-1])
    lse = q.new_empty(batch, nheads, seqlen_q, dtype=torch.float32)
    probs = q.new_empty((batch, nheads, seqlen_q, k.shape[1]) if return_probs else (0,), dtype=torch.float32)
    return out, lse, probs


def _varlen_outputs(q: Tensor, v: Tensor, cu_seqlens_q: Tensor, max_seqlen_q: int, max_seqlen_k: int,
                    return_probs: bool):
    total_q, nheads, _ = q.shape
    batch = cu_seqlens_q.shape[0] - 1
    out = q.new_empty(total_q, nheads, v.shape[-1])
    lse = q.new_empty(nheads, total_q, dtype=torch.float32)
    probs = q.new_empty((batch, nheads, max_seqlen_q, max_seqlen_k) if return_probs else (0,), dtype=torch.float32)
    return out, lse, probs


def _seed_offset(rng_state: Tensor, dropout_p: float) -> Tuple[int, int]:
    if dropout_p <= 0.0:
        return 0, 0
    seed, offset = (int(x) for x in rng_state.tolist())
    return seed, offset


# ------------------------------------------------------------------------------------------------------------------
# Dense batches: q (batch, seqlen_q, nheads, d), k (batch, seqlen_k, nheads_k, d), v (batch, seqlen_k, nheads_k, dv)
# ------------------------------------------------------------------------------------------------------------------


def _fwd_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dropout_p: float,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    deterministic: bool,
    return_probs: bool,
    rng_seed: Tensor,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Returns (out, softmax_lse, attn_probs, rng_state); attn_probs is empty unless return_probs.
    `deterministic` is the backward's option, carried here so that autograd can pass it on; rng_seed comes from
    draw_seed."""
    out, lse, probs = _dense_outputs(q, k, v, return_probs)
    rng_state = _rng_state_of(rng_seed, dropout_p)
    seed, offset = _seed_offset(rng_state, dropout_p)
    _C.forward(_d(q), _d(k), _d(v), _d(out), _d(lse), _d(probs) if return_probs else None, softmax_scale, causal,
               window_left, window_right, softcap, _d(alibi_slopes), dropout_p, seed, offset, _stream_of(q),
               _allocator_for(q))
    return out, lse, probs, rng_state


fwd = torch.library.custom_op("flashattn::fwd", mutates_args=())(_fwd_impl)


@fwd.register_fake
def _(q, k, v, dropout_p, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, deterministic,
      return_probs, rng_seed):
    return (*_dense_outputs(q, k, v, return_probs), _rng_state_like())


def _bwd_impl(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    softmax_lse: Tensor,
    dropout_p: float,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    deterministic: bool,
    rng_state: Tensor,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Returns (dq, dk, dv) for the forward that returned out, softmax_lse and rng_state."""
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    seed, offset = _seed_offset(rng_state, dropout_p)
    _C.backward(_d(_last_dim_contiguous(dout)), _d(q), _d(k), _d(v), _d(out), _d(softmax_lse), _d(dq), _d(dk),
                _d(dv), None, softmax_scale, causal, window_left, window_right, softcap, _d(alibi_slopes), dropout_p,
                seed, offset, deterministic, _stream_of(q), _allocator_for(q))
    return dq, dk, dv


bwd = torch.library.custom_op("flashattn::bwd", mutates_args=())(_bwd_impl)


@bwd.register_fake
def _(dout, q, k, v, out, softmax_lse, dropout_p, softmax_scale, causal, window_left, window_right, softcap,
      alibi_slopes, deterministic, rng_state):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _fwd_setup_context(ctx, inputs, output):
    (q, k, v, dropout_p, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
     deterministic) = inputs[:11]
    out, lse, _, rng_state = output
    ctx.save_for_backward(q, k, v, out, lse, rng_state, alibi_slopes)
    ctx.options = (dropout_p, softmax_scale, causal, window_left, window_right, softcap)
    ctx.deterministic = deterministic


def _fwd_gradients(ctx, dout, backward):
    q, k, v, out, lse, rng_state, alibi_slopes = ctx.saved_tensors
    dropout_p, softmax_scale, causal, window_left, window_right, softcap = ctx.options
    dq, dk, dv = backward(dout, q, k, v, out, lse, dropout_p, softmax_scale, causal, window_left, window_right,
                          softcap, alibi_slopes, ctx.deterministic, rng_state)
    return (dq, dk, dv) + (None,) * 10


def _fwd_backward(ctx, dout, dlse, dprobs, drng_state):
    return _fwd_gradients(ctx, dout, bwd)


fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)


# ------------------------------------------------------------------------------------------------------------------
# Variable-length batches: q (total_q, nheads, d), k (total_k, nheads_k, d), v (total_k, nheads_k, dv), sequence b
# in rows [cu_seqlens[b], cu_seqlens[b + 1])
# ------------------------------------------------------------------------------------------------------------------


def _varlen_fwd_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    seqused_k: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    deterministic: bool,
    return_probs: bool,
    rng_seed: Tensor,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Returns (out, softmax_lse (nheads, total_q), attn_probs, rng_state)."""
    out, lse, probs = _varlen_outputs(q, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k, return_probs)
    rng_state = _rng_state_of(rng_seed, dropout_p)
    seed, offset = _seed_offset(rng_state, dropout_p)
    _C.varlen_forward(_d(q), _d(k), _d(v), _d(cu_seqlens_q), _d(cu_seqlens_k), _d(seqused_k), max_seqlen_q,
                      max_seqlen_k, _d(out), _d(lse), _d(probs) if return_probs else None, softmax_scale, causal,
                      window_left, window_right, softcap, _d(alibi_slopes), dropout_p, seed, offset, _stream_of(q),
                      _allocator_for(q))
    return out, lse, probs, rng_state


varlen_fwd = torch.library.custom_op("flashattn::varlen_fwd", mutates_args=())(_varlen_fwd_impl)


@varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
      window_left, window_right, softcap, alibi_slopes, deterministic, return_probs, rng_seed):
    return (*_varlen_outputs(q, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k, return_probs), _rng_state_like())


def _varlen_bwd_impl(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    softmax_lse: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    seqused_k: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    deterministic: bool,
    rng_state: Tensor,
) -> Tuple[Tensor, Tensor, Tensor]:
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    seed, offset = _seed_offset(rng_state, dropout_p)
    _C.varlen_backward(_d(_last_dim_contiguous(dout)), _d(q), _d(k), _d(v), _d(out), _d(softmax_lse),
                       _d(cu_seqlens_q), _d(cu_seqlens_k), _d(seqused_k), max_seqlen_q, max_seqlen_k, _d(dq), _d(dk),
                       _d(dv), None, softmax_scale, causal, window_left, window_right, softcap, _d(alibi_slopes),
                       dropout_p, seed, offset, deterministic, _stream_of(q), _allocator_for(q))
    return dq, dk, dv


varlen_bwd = torch.library.custom_op("flashattn::varlen_bwd", mutates_args=())(_varlen_bwd_impl)


@varlen_bwd.register_fake
def _(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p,
      softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, deterministic, rng_state):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _varlen_fwd_setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
     window_left, window_right, softcap, alibi_slopes, deterministic) = inputs[:16]
    out, lse, _, rng_state = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, rng_state, alibi_slopes)
    ctx.options = (max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right, softcap)
    ctx.deterministic = deterministic


def _varlen_fwd_gradients(ctx, dout, backward):
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, rng_state, alibi_slopes = ctx.saved_tensors
    max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right, softcap = ctx.options
    dq, dk, dv = backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                          max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                          alibi_slopes, ctx.deterministic, rng_state)
    return (dq, dk, dv) + (None,) * 15


def _varlen_fwd_backward(ctx, dout, dlse, dprobs, drng_state):
    return _varlen_fwd_gradients(ctx, dout, varlen_bwd)


varlen_fwd.register_autograd(_varlen_fwd_backward, setup_context=_varlen_fwd_setup_context)


# ------------------------------------------------------------------------------------------------------------------
# KV cache (inference): q (batch, seqlen_q, nheads, d) against k_cache / v_cache, dense or paged, appending k, v in
# place. Forward only, as flash_attn's.
# ------------------------------------------------------------------------------------------------------------------


def _kvcache_fwd_impl(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    k: Optional[Tensor],
    v: Optional[Tensor],
    rotary_cos: Optional[Tensor],
    rotary_sin: Optional[Tensor],
    rotary_interleaved: bool,
    cache_seqlens: Optional[Tensor],
    cache_seqlen: int,
    cache_batch_idx: Optional[Tensor],
    cache_leftpad: Optional[Tensor],
    block_table: Optional[Tensor],
    num_splits: int,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
) -> Tuple[Tensor, Tensor]:
    """Returns (out, softmax_lse); writes k and v (rotated) into the caches at cache_seqlens."""
    out, lse = _kvcache_outputs(q, v_cache)
    _C.kvcache_forward(_d(q), _d(k_cache), _d(v_cache), _d(k), _d(v), _d(rotary_cos), _d(rotary_sin),
                       rotary_interleaved,
                       _d(cache_seqlens), cache_seqlen, _d(cache_batch_idx), _d(cache_leftpad), _d(block_table),
                       num_splits, _d(out), _d(lse), softmax_scale, causal, window_left, window_right, softcap,
                       _d(alibi_slopes), _stream_of(q), _allocator_for(q))
    return out, lse


kvcache_fwd = torch.library.custom_op("flashattn::kvcache_fwd",
                                      mutates_args=("k_cache", "v_cache"))(_kvcache_fwd_impl)


@kvcache_fwd.register_fake
def _(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, rotary_interleaved, cache_seqlens, cache_seqlen,
      cache_batch_idx, cache_leftpad, block_table, num_splits, softmax_scale, causal, window_left, window_right,
      softcap, alibi_slopes):
    return _kvcache_outputs(q, v_cache)


def _kvcache_outputs(q: Tensor, v_cache: Tensor):
    batch, seqlen_q, nheads, _ = q.shape
    out = q.new_empty(batch, seqlen_q, nheads, v_cache.shape[-1])
    lse = q.new_empty(batch, nheads, seqlen_q, dtype=torch.float32)
    return out, lse


# ------------------------------------------------------------------------------------------------------------------
# Merging two results over disjoint keys by their LSEs (split-KV, context parallelism). Forward only.
# ------------------------------------------------------------------------------------------------------------------


def _merge_impl(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> Tuple[Tensor, Tensor]:
    out, lse = torch.empty_like(out_a), torch.empty_like(lse_a)
    _C.merge_attention(_d(out_a), _d(lse_a), _d(out_b), _d(lse_b), _d(out), _d(lse), _stream_of(out_a))
    return out, lse


merge = torch.library.custom_op("flashattn::merge", mutates_args=())(_merge_impl)


@merge.register_fake
def _(out_a, lse_a, out_b, lse_b):
    return torch.empty_like(out_a), torch.empty_like(lse_a)


# ------------------------------------------------------------------------------------------------------------------
# The eager route: the same implementations without torch's operator dispatch (see the module's docstring)
# ------------------------------------------------------------------------------------------------------------------

_dispatch_stack_depth = getattr(torch._C, "_len_torch_dispatch_stack", None)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)
_increment_version = getattr(torch.autograd.graph, "increment_version", None)
_PLAIN_TENSOR_TYPES = (Tensor, torch.nn.Parameter)


def _eager(*tensors) -> bool:
    """True where calling an implementation directly is what the operator would do: not under torch.compile (checked
    first, so that dynamo folds it), no dispatch mode (fake tensors, make_fx, opcheck), no functorch transform, and
    only plain tensors (no subclasses). Where torch lacks a probe, the operators are used."""
    if torch.compiler.is_compiling():
        return False
    if _dispatch_stack_depth is None or _dispatch_stack_depth() != 0:
        return False
    if _functorch_active is None or _functorch_active():
        return False
    # Meta tensors (shape probing, meta-device model init) take the operators: their fake functions handle them, and
    # DLPack cannot export them.
    return all(t is None or (type(t) in _PLAIN_TENSOR_TYPES and t.device.type in ("cpu", "cuda")) for t in tensors)


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _autograd_function(name, impl, setup_context, gradients, backward_impl):
    """A torch.autograd.Function running a forward implementation directly, with its operator's context and
    gradients (the backward implementation called directly too)."""

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            output = impl(*inputs)
            setup_context(ctx, inputs, output)
            ctx.mark_non_differentiable(*output[1:])
            return output

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, dout, *unused):
            return gradients(ctx, dout, backward_impl)

    Function.__name__ = Function.__qualname__ = name
    return Function


_FwdFunction = _autograd_function("_FwdFunction", _fwd_impl, _fwd_setup_context, _fwd_gradients, _bwd_impl)
_VarlenFwdFunction = _autograd_function("_VarlenFwdFunction", _varlen_fwd_impl, _varlen_fwd_setup_context,
                                        _varlen_fwd_gradients, _varlen_bwd_impl)


def _route(op, impl, function, args, tensors, differentiable):
    """The registered operator where the eager route does not apply; else the implementation itself, under its
    autograd.Function when a differentiable input needs a gradient."""
    if not _eager(*tensors):
        return op(*args)
    if _needs_grad(*differentiable):
        return function.apply(*args)
    return impl(*args)


def call_fwd(q, k, v, dropout_p, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
             deterministic, return_probs):
    """fwd, by the eager route where it applies."""
    args = (q, k, v, dropout_p, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
            deterministic, return_probs, draw_seed(dropout_p))
    return _route(fwd, _fwd_impl, _FwdFunction, args, (q, k, v, alibi_slopes), (q, k, v))


def call_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p,
                    softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, deterministic,
                    return_probs):
    """varlen_fwd, by the eager route where it applies."""
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
            causal, window_left, window_right, softcap, alibi_slopes, deterministic, return_probs, draw_seed(dropout_p))
    return _route(varlen_fwd, _varlen_fwd_impl, _VarlenFwdFunction, args,
                  (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes), (q, k, v))


def call_kvcache_fwd(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, rotary_interleaved, cache_seqlens,
                     cache_seqlen, cache_batch_idx, cache_leftpad, block_table, num_splits, softmax_scale, causal,
                     window_left, window_right, softcap, alibi_slopes):
    """kvcache_fwd, by the eager route where it applies (no autograd: the operator has none)."""
    args = (q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, rotary_interleaved, cache_seqlens, cache_seqlen,
            cache_batch_idx, cache_leftpad, block_table, num_splits, softmax_scale, causal, window_left,
            window_right, softcap, alibi_slopes)
    if not _eager(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
                  block_table, alibi_slopes) or _needs_grad(q, k, v):
        return kvcache_fwd(*args)
    result = _kvcache_fwd_impl(*args)
    if _increment_version is not None and k is not None:  # the caches were written in place, as the op declares
        _increment_version(k_cache)
        _increment_version(v_cache)
    return result


def call_merge(out_a, lse_a, out_b, lse_b):
    """merge, by the eager route where it applies."""
    if not _eager(out_a, lse_a, out_b, lse_b) or _needs_grad(out_a, lse_a, out_b, lse_b):
        return merge(out_a, lse_a, out_b, lse_b)
    return _merge_impl(out_a, lse_a, out_b, lse_b)
