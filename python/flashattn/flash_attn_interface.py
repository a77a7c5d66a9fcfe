"""The flash_attn 2.x functions: same names, arguments, defaults and return values.

Replacing ``from flash_attn import flash_attn_func`` by ``from flashattn import flash_attn_func`` is the whole
change. Layouts (as in flash_attn):

    q          (batch, seqlen_q, nheads, headdim)          varlen: (total_q, nheads, headdim)
    k, v       (batch, seqlen_k, nheads_k, headdim)        varlen: (total_k, nheads_k, headdim)
    qkv        (batch, seqlen, 3, nheads, headdim)         varlen: (total, 3, nheads, headdim)
    kv         (batch, seqlen_k, 2, nheads_k, headdim)     varlen: (total_k, 2, nheads_k, headdim)

with nheads divisible by nheads_k (MQA/GQA). Causal masks are aligned to the bottom-right corner of the score
matrix (flash_attn >= 2.1). A head dim that is not a multiple of 8 is padded with zeros and the output sliced back,
as flash_attn does. With return_attn_probs=True the functions return (out, softmax_lse, S_dmask): softmax_lse is
(batch, nheads, seqlen_q) float32 ((nheads, total_q) for varlen); S_dmask is returned only when dropout_p > 0 (else
None, as in flash_attn) and holds the attention probabilities, (batch, nheads, seqlen_q, seqlen_k) float32, negated
where dropout dropped them: meant for testing at small sizes.

CPU tensors (float16, bfloat16, float32, float64) run flashattn's exact CPU reference; CUDA tensors (float16,
bfloat16) its GPU kernels. flashattn.Error (a RuntimeError) names the argument at fault.
"""

import math
from typing import Optional, Tuple

import torch.nn.functional as F
from torch import Tensor

from . import _ops
from ._ops import Error

_HEAD_DIM_MULTIPLE = 8  # the kernels' head-dim granularity; other head dims are zero-padded up to it


def _pad_head_dim(t: Tensor) -> Tensor:
    rest = t.shape[-1] % _HEAD_DIM_MULTIPLE
    return t if rest == 0 else F.pad(t, [0, _HEAD_DIM_MULTIPLE - rest])


def _last_dim_contiguous(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _window(window_size) -> Tuple[int, int]:
    if len(window_size) != 2:
        raise ValueError(f"window_size: expected (left, right), got {window_size!r}")
    return int(window_size[0]), int(window_size[1])


def _check_ranks(rank: int, layout: str, **tensors) -> None:
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != rank:
            error = Error(f"{name}: expected {rank} dimensions {layout}, got shape {tuple(t.shape)}")
            error.status = "invalid_argument"
            raise error


def _scale(head_dim: int, softmax_scale: Optional[float]) -> float:
    """softmax_scale, or 1 / sqrt(head_dim) for None. NaN is refused here: the library reads it as "the default"."""
    if softmax_scale is None:
        return head_dim ** (-0.5)
    scale = float(softmax_scale)
    if math.isnan(scale):
        error = Error(f"softmax_scale: expected a finite value >= 0 or None (1 / sqrt(headdim)), got {scale}")
        error.status = "invalid_argument"
        raise error
    return scale


def _prepare(q: Tensor, k: Tensor, v: Tensor, softmax_scale: Optional[float]):
    head_dim, head_dim_v = q.shape[-1], v.shape[-1]
    scale = _scale(head_dim, softmax_scale)
    q, k, v = (_pad_head_dim(_last_dim_contiguous(t)) for t in (q, k, v))
    return q, k, v, float(scale), head_dim_v


def _result(out, lse, probs, head_dim_v, dropout_p, return_attn_probs):
    if out.shape[-1] != head_dim_v:
        out = out[..., :head_dim_v]
    if not return_attn_probs:
        return out
    return out, lse, (probs if dropout_p > 0 else None)


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """Attention over dense batches: softmax(q k^T * softmax_scale + masks and biases) v, per head.

    dropout_p: probability of dropping (pass 0.0 in evaluation). softmax_scale: default 1 / sqrt(headdim).
    causal: bottom-right aligned causal mask. window_size: (left, right) sliding window, -1 for unbounded.
    softcap: > 0 caps the scores as softcap * tanh(scores / softcap). alibi_slopes: (nheads,) or (batch, nheads)
    float32, adding -slope * |i + seqlen_k - seqlen_q - j| to the score of query i and key j. deterministic: a
    backward that gives bit-identical results run to run. return_attn_probs: see the module's docstring.
    Returns out (batch, seqlen_q, nheads, headdim), or (out, softmax_lse, S_dmask) with return_attn_probs.
    """
    _check_ranks(4, "(batch, seqlen, nheads, headdim)", q=q, k=k, v=v)
    q, k, v, scale, head_dim_v = _prepare(q, k, v, softmax_scale)
    window_left, window_right = _window(window_size)
    out, lse, probs, _ = _ops.call_fwd(q, k, v, float(dropout_p), scale, bool(causal), window_left, window_right,
                                  float(softcap), alibi_slopes, bool(deterministic),
                                  bool(return_attn_probs and dropout_p > 0))
    return _result(out, lse, probs, head_dim_v, dropout_p, return_attn_probs)


def flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_func with q, k, v packed: qkv (batch, seqlen, 3, nheads, headdim)."""
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError(f"qkv: expected shape (batch, seqlen, 3, nheads, headdim), got {tuple(qkv.shape)}")
    q, k, v = qkv.unbind(dim=2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)


def flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_func with k, v packed: kv (batch, seqlen_k, 2, nheads_k, headdim)."""
    if kv.dim() != 5 or kv.shape[2] != 2:
        raise ValueError(f"kv: expected shape (batch, seqlen_k, 2, nheads_k, headdim), got {tuple(kv.shape)}")
    k, v = kv.unbind(dim=2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
):
    """Attention over variable-length sequences packed along the first dimension.

    cu_seqlens_q, cu_seqlens_k: int32 (batch + 1), the cumulative sequence lengths, starting at 0.
    max_seqlen_q, max_seqlen_k: the longest sequence of each. Other arguments as flash_attn_func.
    Returns out (total_q, nheads, headdim), or (out, softmax_lse, S_dmask) with return_attn_probs.
    """
    if block_table is not None:
        raise NotImplementedError(
            "flash_attn_varlen_func: block_table (a paged KV cache) is not supported by flashattn's varlen path yet")
    _check_ranks(3, "(total, nheads, headdim)", q=q, k=k, v=v)
    _check_ranks(1, "(batch + 1)", cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    q, k, v, scale, head_dim_v = _prepare(q, k, v, softmax_scale)
    window_left, window_right = _window(window_size)
    out, lse, probs, _ = _ops.call_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, None, int(max_seqlen_q),
                                         int(max_seqlen_k), float(dropout_p), scale, bool(causal), window_left,
                                         window_right, float(softcap), alibi_slopes, bool(deterministic),
                                         bool(return_attn_probs and dropout_p > 0))
    return _result(out, lse, probs, head_dim_v, dropout_p, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_varlen_func with q, k, v packed: qkv (total, 3, nheads, headdim), one cu_seqlens for all."""
    if qkv.dim() != 4 or qkv.shape[1] != 3:
        raise ValueError(f"qkv: expected shape (total, 3, nheads, headdim), got {tuple(qkv.shape)}")
    q, k, v = qkv.unbind(dim=1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """flash_attn_varlen_func with k, v packed: kv (total_k, 2, nheads_k, headdim)."""
    if kv.dim() != 4 or kv.shape[1] != 2:
        raise ValueError(f"kv: expected shape (total_k, 2, nheads_k, headdim), got {tuple(kv.shape)}")
    k, v = kv.unbind(dim=1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    """Attention of q against a KV cache, for inference; k and v, when given, are first written into the cache in
    place at positions cache_seqlens (rotated by rotary_cos / rotary_sin when given) and attended to.

    q (batch, seqlen_q, nheads, headdim). k_cache, v_cache: dense (batch_cache, seqlen_cache, nheads_k, headdim),
    or paged (num_blocks, page_size, nheads_k, headdim) with block_table (batch, max_blocks_per_seq) int32; any
    page_size that is a multiple of 16. k, v (batch, seqlen_new, nheads_k, headdim). rotary_cos, rotary_sin
    (seqlen_ro, rotary_dim / 2): k rotates at positions cache_seqlens + j, q at cache_seqlens + i when causal or
    windowed (a window narrower than the cache on either side), else at cache_seqlens. cache_seqlens: an int or int32
    (batch,) tensor, the keys already cached.
    cache_batch_idx: int32 (batch,), the cache entry of each sequence (dense caches). cache_leftpad: int32 (batch,),
    the first valid cache position. num_splits: 0 lets flashattn choose how to split long caches.
    A headdim that is not a multiple of 8 is padded as FlashAttention pads it: q, k, v and the caches are copied
    with zero columns, and after an append the caches are copied back whole (slow: keep headdim a multiple of 8 for
    decoding at speed).
    Returns out (batch, seqlen_q, nheads, headdim), or (out, softmax_lse) with return_softmax_lse.
    """
    _check_ranks(4, "(batch, seqlen, nheads, headdim)", q=q, k_cache=k_cache, v_cache=v_cache)
    if (k is None) != (v is None):
        raise ValueError("k, v: give both (to append to the cache) or neither")
    q = _last_dim_contiguous(q)
    k, v = (None if t is None else _last_dim_contiguous(t) for t in (k, v))
    scale = _scale(q.shape[-1], softmax_scale)
    head_dim_v = v_cache.shape[-1]
    padded = any(t.shape[-1] % _HEAD_DIM_MULTIPLE for t in (q, k_cache, v_cache))
    if padded:
        k_cache_in, v_cache_in = k_cache, v_cache
        q, k_cache, v_cache = (_pad_head_dim(_last_dim_contiguous(t)) for t in (q, k_cache, v_cache))
        k, v = (None if t is None else _pad_head_dim(t) for t in (k, v))
    if cache_seqlens is None or isinstance(cache_seqlens, Tensor):
        seqlens_tensor, seqlen = cache_seqlens, -1
    else:
        seqlens_tensor, seqlen = None, int(cache_seqlens)
    window_left, window_right = _window(window_size)
    out, lse = _ops.call_kvcache_fwd(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, bool(rotary_interleaved),
                                seqlens_tensor, seqlen, cache_batch_idx, cache_leftpad, block_table, int(num_splits),
                                float(scale), bool(causal), window_left, window_right, float(softcap), alibi_slopes)
    if padded:
        if k is not None:  # the appended rows, into the caller's caches
            k_cache_in.copy_(k_cache[..., : k_cache_in.shape[-1]])
            v_cache_in.copy_(v_cache[..., : v_cache_in.shape[-1]])
        out = out[..., :head_dim_v]
    return (out, lse) if return_softmax_lse else out


def merge_attention(out_a, lse_a, out_b, lse_b):
    """flashattn's own: merges two attention results of the same queries over disjoint key sets.

    out_a, out_b (batch, seqlen_q, nheads, headdim); lse_a, lse_b (batch, nheads, seqlen_q) float32, as
    flash_attn_func returns them with return_attn_probs=True. Returns (out, lse) of attention over the union of the
    keys: lse = log(exp(lse_a) + exp(lse_b)), out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b. A part whose
    lse is +inf (it saw no key) weighs nothing.
    """
    _check_ranks(4, "(batch, seqlen, nheads, headdim)", out_a=out_a, out_b=out_b)
    _check_ranks(3, "(batch, nheads, seqlen)", lse_a=lse_a, lse_b=lse_b)
    return _ops.call_merge(_last_dim_contiguous(out_a), lse_a.contiguous(), _last_dim_contiguous(out_b),
                      lse_b.contiguous())
