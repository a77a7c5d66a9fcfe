"""Bad inputs get an error that names the argument and what was expected (flashattn.Error, a RuntimeError)."""

import pytest
import torch

import flashattn
from flashattn import flash_attn_func, flash_attn_qkvpacked_func, flash_attn_varlen_func


def _qkv(batch=2, seqlen_q=8, seqlen_k=8, nheads=2, nheads_k=2, head_dim=16, dtype=torch.float32):
    return (torch.randn(batch, seqlen_q, nheads, head_dim, dtype=dtype),
            torch.randn(batch, seqlen_k, nheads_k, head_dim, dtype=dtype),
            torch.randn(batch, seqlen_k, nheads_k, head_dim, dtype=dtype))


def _raises(match, fn, *args, **kwargs):
    with pytest.raises(flashattn.Error, match=match) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, RuntimeError)
    return info.value


def test_wrong_dtype_names_the_tensor():
    q, k, v = _qkv()
    _raises(r"^k: .*float", flash_attn_func, q, k.to(torch.int32), v)


def test_mixed_dtypes():
    q, k, v = _qkv()
    _raises(r"^v: ", flash_attn_func, q, k, v.to(torch.float16))


def test_mismatched_batch():
    q, k, v = _qkv()
    _raises(r"^k: expected shape \(batch=2", flash_attn_func, q, k[:1], v[:1])


def test_wrong_rank():
    q, k, v = _qkv()
    _raises(r"^q: ", flash_attn_func, q[0], k, v)


def test_head_dim_too_large():
    q, k, v = _qkv(head_dim=264)
    _raises(r"head_dim.*256.*264", flash_attn_func, q, k, v)


def test_heads_not_divisible():
    q, k, v = _qkv(nheads=3, nheads_k=2)
    _raises(r"^k: expected nheads_k dividing nheads", flash_attn_func, q, k, v)


def test_negative_window():
    q, k, v = _qkv()
    _raises(r"window", flash_attn_func, q, k, v, window_size=(-3, 0))


def test_window_size_must_be_a_pair():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="window_size"):
        flash_attn_func(q, k, v, window_size=(1, 2, 3))


def test_dropout_out_of_range():
    q, k, v = _qkv()
    _raises(r"dropout_p", flash_attn_func, q, k, v, dropout_p=1.0)


def test_alibi_wrong_shape_and_dtype():
    q, k, v = _qkv()
    _raises(r"^alibi_slopes: ", flash_attn_func, q, k, v, alibi_slopes=torch.ones(3))
    _raises(r"^alibi_slopes: ", flash_attn_func, q, k, v, alibi_slopes=torch.ones(2, dtype=torch.float64))


def test_negative_softcap_and_scale():
    q, k, v = _qkv()
    _raises(r"softcap", flash_attn_func, q, k, v, softcap=-1.0)
    _raises(r"softmax_scale", flash_attn_func, q, k, v, softmax_scale=float("nan"))
    _raises(r"softmax_scale", flash_attn_func, q, k, v, softmax_scale=float("inf"))
    _raises(r"softmax_scale", flash_attn_func, q, k, v, softmax_scale=-0.5)


def test_varlen_cu_seqlens_checked():
    q = torch.randn(10, 2, 16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    _raises(r"^cu_seqlens_q: ", flash_attn_varlen_func, q, q, q, cu.to(torch.int64), cu, 6, 6)
    _raises(r"^cu_seqlens_k: ", flash_attn_varlen_func, q, q, q, cu, torch.tensor([0, 6, 4], dtype=torch.int32), 6,
            6)
    _raises(r"cu_seqlens_q", flash_attn_varlen_func, q, q, q, torch.tensor([0, 4, 11], dtype=torch.int32), cu, 7, 6)


def test_varlen_block_table_not_supported():
    q = torch.randn(10, 2, 16)
    cu = torch.tensor([0, 10], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="block_table"):
        flash_attn_varlen_func(q, q, q, cu, cu, 10, 10, block_table=torch.zeros(1, 1, dtype=torch.int32))


def test_packed_shape_checked():
    with pytest.raises(ValueError, match="qkv"):
        flash_attn_qkvpacked_func(torch.randn(2, 8, 2, 2, 16))


def test_error_carries_status():
    q, k, v = _qkv()
    err = _raises(r"^k: ", flash_attn_func, q, k[:1], v[:1])
    assert err.status == "invalid_argument"
