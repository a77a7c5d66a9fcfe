"""A straightforward torch implementation of attention, the oracle of the Python tests, and the closeness rule.

It materialises the score matrix, as nobody should outside a test. Computed in float64 it is the oracle; computed
in the inputs' own dtype it is the "straightforward same-precision implementation" whose error sets the
tolerance: flashattn's error against the float64 oracle may be at most twice that error plus a tiny absolute slack.
"""

import math
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

# Absolute slack of the closeness rule, relative to the largest magnitude of the oracle: what rounding the final
# result to float32 alone can cost, so that a comparison never hinges on an exactly representable value.
SLACK_OF_MAX = 2.0**-20


def attention_ref(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[Tensor] = None,
    keep: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    dtype: torch.dtype = torch.float64,
) -> Tuple[Tensor, Tensor]:
    """(out, lse) for q (batch, seqlen_q, nheads, d), k (batch, seqlen_k, nheads_k, d), v (.., dv).

    The masks are aligned to the bottom-right corner: query i sees key j iff
    i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right (right = 0 when causal, -1 unbounded).
    ALiBi adds -slope * |i + seqlen_k - seqlen_q - j|. `keep` (batch, nheads, seqlen_q, seqlen_k) bool applies
    dropout with scaling 1 / (1 - dropout_p). A row that sees no key gets output 0 and lse +inf.
    """
    batch, seqlen_q, nheads, head_dim = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    q, k, v = (t.to(dtype) for t in (q, k, v))
    groups = nheads // nheads_k
    k = k.repeat_interleave(groups, dim=2)
    v = v.repeat_interleave(groups, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    rows = torch.arange(seqlen_q, device=q.device).view(-1, 1)
    cols = torch.arange(seqlen_k, device=q.device).view(1, -1)
    diagonal = rows + seqlen_k - seqlen_q
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(device=q.device, dtype=dtype).view(batch if alibi_slopes.dim() == 2 else 1, nheads, 1, 1)
        scores = scores - slopes * (diagonal - cols).abs().to(dtype)
    left, right = window_size
    if causal:
        right = 0
    masked = torch.zeros(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
    if right >= 0:
        masked |= cols > diagonal + right
    if left >= 0:
        masked |= cols < diagonal - left
    scores = scores.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    empty_row = torch.isneginf(lse)
    probs = torch.softmax(scores, dim=-1).masked_fill(empty_row.unsqueeze(-1), 0.0)
    if keep is not None:
        probs = probs * keep.to(dtype) / (1.0 - dropout_p)
    out = torch.einsum("bhqk,bkhd->bqhd", probs, v)
    lse = lse.masked_fill(empty_row, float("inf"))
    return out, lse


def varlen_attention_ref(q, k, v, cu_seqlens_q, cu_seqlens_k, *, alibi_slopes=None, keep=None, **kwargs):
    """attention_ref over packed sequences: (out (total_q, nheads, dv), lse (nheads, total_q))."""
    outs, lses = [], []
    cu_q, cu_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cu_q) - 1):
        qs = q[cu_q[b] : cu_q[b + 1]].unsqueeze(0)
        ks = k[cu_k[b] : cu_k[b + 1]].unsqueeze(0)
        vs = v[cu_k[b] : cu_k[b + 1]].unsqueeze(0)
        slopes = alibi_slopes[b] if alibi_slopes is not None and alibi_slopes.dim() == 2 else alibi_slopes
        keep_b = None
        if keep is not None:
            keep_b = keep[b : b + 1, :, : qs.shape[1], : ks.shape[1]]
        out, lse = attention_ref(qs, ks, vs, alibi_slopes=slopes, keep=keep_b, **kwargs)
        outs.append(out[0])
        lses.append(lse[0])
    return torch.cat(outs, 0), torch.cat(lses, 1)


def kept(s_dmask: Tensor) -> Tensor:
    """The dropout keep mask encoded in S_dmask (probabilities negated where dropped)."""
    return ~(s_dmask < 0)


def max_error(got: Tensor, want: Tensor) -> float:
    return (got.double() - want.double()).abs().max().item() if got.numel() else 0.0


def assert_close_by_rule(got: Tensor, oracle: Tensor, same_precision: Tensor, what: str) -> None:
    """got's error against the float64 oracle <= 2 x the straightforward same-precision error + tiny slack."""
    assert got.shape == oracle.shape, f"{what}: shape {tuple(got.shape)} != {tuple(oracle.shape)}"
    finite = torch.isfinite(oracle)
    assert torch.equal(torch.isfinite(got), finite), f"{what}: non-finite elements differ from the oracle"
    assert torch.equal(got[~finite].double(), oracle[~finite].double()), f"{what}: infinities differ"
    got, oracle, same_precision = got[finite], oracle[finite], same_precision[finite]
    baseline = max_error(same_precision, oracle)
    scale = oracle.abs().max().item() if oracle.numel() else 0.0
    bound = 2.0 * baseline + SLACK_OF_MAX * max(scale, 1.0)
    error = max_error(got, oracle)
    assert error <= bound, f"{what}: error {error:.3g} > bound {bound:.3g} (same-precision error {baseline:.3g})"


def random_inputs(shapes: Sequence[Tuple[int, ...]], dtype, device="cpu", requires_grad=True):
    """Fresh normal inputs (never zeros), as leaves that require grad."""
    return [torch.randn(*s, dtype=dtype, device=device).requires_grad_(requires_grad) for s in shapes]


def alibi_for(nheads: int, batch: Optional[int] = None) -> Tensor:
    """ALiBi slopes as their paper defines them (2^(-8 i / nheads)), per head or per (batch, head)."""
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / nheads) for i in range(nheads)], dtype=torch.float32)
    return slopes if batch is None else slopes.repeat(batch, 1) * torch.linspace(0.5, 1.5, batch).view(-1, 1)


def assert_backward_deterministic(out: Tensor, inputs: Sequence[Tensor]) -> None:
    """Two backward passes through `out` give bit-identical gradients."""
    dout = torch.randn_like(out)
    first = torch.autograd.grad(out, inputs, dout, retain_graph=True)
    second = torch.autograd.grad(out, inputs, dout)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
