"""flashattn's torch operators: forward and backward as separate custom ops, with fake (meta) implementations for
torch.compile and an autograd formula that connects them.

The operators allocate their outputs and scratch memory through torch (so the caching allocator and CUDA graph
pools are used), take the stream torch is using, and hand tensors to the C++ API through DLPack. Tensors on the
CPU run the exact reference implementation.

Dropout: each forward draws a 64-bit seed from torch's default generator (so torch.manual_seed reproduces it) and
returns it, with the Philox offset, as `rng_state`, a CPU int64 tensor of two elements; the backward regenerates
the same mask from it. Under CUDA graph capture the seed drawn at capture time is baked into the graph, so every
replay applies the same dropout mask.
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
    if not t.is_cuda:
        return None
    device = t.device
    return lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device=device)


def _d(t: Optional[Tensor]) -> Optional[Tensor]:
    # DLPack refuses tensors that require grad; the operators run below autograd, so detaching only drops the flag.
    return None if t is None else t.detach()


def _last_dim_contiguous(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _draw_rng_state(dropout_p: float) -> Tensor:
    seed = int(torch.randint(0, _SEED_BOUND, (), dtype=torch.int64)) if dropout_p > 0.0 else 0
    return torch.tensor([seed, 0], dtype=torch.int64)


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


def _seed_offset(rng_state: Tensor) -> Tuple[int, int]:
    seed, offset = (int(x) for x in rng_state.tolist())
    return seed, offset


# ------------------------------------------------------------------------------------------------------------------
# Dense batches: q (batch, seqlen_q, nheads, d), k (batch, seqlen_k, nheads_k, d), v (batch, seqlen_k, nheads_k, dv)
# ------------------------------------------------------------------------------------------------------------------


@torch.library.custom_op("flashattn::fwd", mutates_args=())
def fwd(
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
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Returns (out, softmax_lse, attn_probs, rng_state); attn_probs is empty unless return_probs.
    `deterministic` is the backward's option, carried here so that autograd can pass it on."""
    out, lse, probs = _dense_outputs(q, k, v, return_probs)
    rng_state = _draw_rng_state(dropout_p)
    seed, offset = _seed_offset(rng_state)
    _C.forward(_d(q), _d(k), _d(v), out, lse, probs if return_probs else None, softmax_scale, causal, window_left,
               window_right, softcap, _d(alibi_slopes), dropout_p, seed, offset, _stream_of(q), _allocator_for(q))
    return out, lse, probs, rng_state


@fwd.register_fake
def _(q, k, v, dropout_p, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, deterministic,
      return_probs):
    return (*_dense_outputs(q, k, v, return_probs), _rng_state_like())


@torch.library.custom_op("flashattn::bwd", mutates_args=())
def bwd(
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
    seed, offset = _seed_offset(rng_state)
    _C.backward(_d(_last_dim_contiguous(dout)), _d(q), _d(k), _d(v), _d(out), _d(softmax_lse), dq, dk, dv, None,
                softmax_scale, causal, window_left, window_right, softcap, _d(alibi_slopes), dropout_p, seed, offset,
                deterministic, _stream_of(q), _allocator_for(q))
    return dq, dk, dv


@bwd.register_fake
def _(dout, q, k, v, out, softmax_lse, dropout_p, softmax_scale, causal, window_left, window_right, softcap,
      alibi_slopes, deterministic, rng_state):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _fwd_setup_context(ctx, inputs, output):
    q, k, v, dropout_p, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, deterministic, _ = inputs
    out, lse, _, rng_state = output
    ctx.save_for_backward(q, k, v, out, lse, rng_state, alibi_slopes)
    ctx.options = (dropout_p, softmax_scale, causal, window_left, window_right, softcap)
    ctx.deterministic = deterministic


def _fwd_backward(ctx, dout, dlse, dprobs, drng_state):
    q, k, v, out, lse, rng_state, alibi_slopes = ctx.saved_tensors
    dropout_p, softmax_scale, causal, window_left, window_right, softcap = ctx.options
    dq, dk, dv = bwd(dout, q, k, v, out, lse, dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                     alibi_slopes, ctx.deterministic, rng_state)
    return (dq, dk, dv) + (None,) * 9


fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)


# ------------------------------------------------------------------------------------------------------------------
# Variable-length batches: q (total_q, nheads, d), k (total_k, nheads_k, d), v (total_k, nheads_k, dv), sequence b
# in rows [cu_seqlens[b], cu_seqlens[b + 1])
# ------------------------------------------------------------------------------------------------------------------


@torch.library.custom_op("flashattn::varlen_fwd", mutates_args=())
def varlen_fwd(
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
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Returns (out, softmax_lse (nheads, total_q), attn_probs, rng_state)."""
    out, lse, probs = _varlen_outputs(q, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k, return_probs)
    rng_state = _draw_rng_state(dropout_p)
    seed, offset = _seed_offset(rng_state)
    _C.varlen_forward(_d(q), _d(k), _d(v), _d(cu_seqlens_q), _d(cu_seqlens_k), _d(seqused_k), max_seqlen_q,
                      max_seqlen_k, out, lse, probs if return_probs else None, softmax_scale, causal, window_left,
                      window_right, softcap, _d(alibi_slopes), dropout_p, seed, offset, _stream_of(q),
                      _allocator_for(q))
    return out, lse, probs, rng_state


@varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
      window_left, window_right, softcap, alibi_slopes, deterministic, return_probs):
    return (*_varlen_outputs(q, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k, return_probs), _rng_state_like())


@torch.library.custom_op("flashattn::varlen_bwd", mutates_args=())
def varlen_bwd(
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
    seed, offset = _seed_offset(rng_state)
    _C.varlen_backward(_d(_last_dim_contiguous(dout)), _d(q), _d(k), _d(v), _d(out), _d(softmax_lse),
                       _d(cu_seqlens_q), _d(cu_seqlens_k), _d(seqused_k), max_seqlen_q, max_seqlen_k, dq, dk, dv,
                       None, softmax_scale, causal, window_left, window_right, softcap, _d(alibi_slopes), dropout_p,
                       seed, offset, deterministic, _stream_of(q), _allocator_for(q))
    return dq, dk, dv


@varlen_bwd.register_fake
def _(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p,
      softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, deterministic, rng_state):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _varlen_fwd_setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
     window_left, window_right, softcap, alibi_slopes, deterministic, _) = inputs
    out, lse, _, rng_state = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, rng_state, alibi_slopes)
    ctx.options = (max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right, softcap)
    ctx.deterministic = deterministic


def _varlen_fwd_backward(ctx, dout, dlse, dprobs, drng_state):
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, rng_state, alibi_slopes = ctx.saved_tensors
    max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right, softcap = ctx.options
    dq, dk, dv = varlen_bwd(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                            max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                            alibi_slopes, ctx.deterministic, rng_state)
    return (dq, dk, dv) + (None,) * 14


varlen_fwd.register_autograd(_varlen_fwd_backward, setup_context=_varlen_fwd_setup_context)


# ------------------------------------------------------------------------------------------------------------------
# KV cache (inference): q (batch, seqlen_q, nheads, d) against k_cache / v_cache, dense or paged, appending k, v in
# place. Forward only, as flash_attn's.
# ------------------------------------------------------------------------------------------------------------------


@torch.library.custom_op("flashattn::kvcache_fwd", mutates_args=("k_cache", "v_cache"))
def kvcache_fwd(
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
    _C.kvcache_forward(_d(q), k_cache, v_cache, _d(k), _d(v), _d(rotary_cos), _d(rotary_sin), rotary_interleaved,
                       _d(cache_seqlens), cache_seqlen, _d(cache_batch_idx), _d(cache_leftpad), _d(block_table),
                       num_splits, out, lse, softmax_scale, causal, window_left, window_right, softcap,
                       _d(alibi_slopes), _stream_of(q), _allocator_for(q))
    return out, lse


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


@torch.library.custom_op("flashattn::merge", mutates_args=())
def merge(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> Tuple[Tensor, Tensor]:
    out, lse = torch.empty_like(out_a), torch.empty_like(lse_a)
    _C.merge_attention(_d(out_a), _d(lse_a), _d(out_b), _d(lse_b), out, lse, _stream_of(out_a))
    return out, lse


@merge.register_fake
def _(out_a, lse_a, out_b, lse_b):
    return torch.empty_like(out_a), torch.empty_like(lse_a)
