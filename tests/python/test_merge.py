"""merge_attention: attention over all keys is the merge of attention over two disjoint key sets, on every device
there is; a part that saw no key weighs nothing."""

import pytest
import torch

from attention_reference import assert_close_by_rule, attention_ref
from flashattn import flash_attn_func, merge_attention

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_merge_of_two_key_halves_is_the_whole(device, dtype):
    torch.manual_seed(0)
    q = torch.randn(2, 7, 4, 64, dtype=dtype, device=device)
    k, v = (torch.randn(2, 300, 4, 64, dtype=dtype, device=device) for _ in range(2))
    out_a, lse_a, _ = flash_attn_func(q, k[:, :113], v[:, :113], return_attn_probs=True)
    out_b, lse_b, _ = flash_attn_func(q, k[:, 113:], v[:, 113:], return_attn_probs=True)
    out, lse = merge_attention(out_a, lse_a, out_b, lse_b)
    oracle, lse64 = attention_ref(q.cpu(), k.cpu(), v.cpu())
    same, _ = attention_ref(q.cpu(), k.cpu(), v.cpu(), dtype=dtype)
    assert_close_by_rule(out.cpu(), oracle, same, "merged out")
    assert (lse.cpu().double() - lse64).abs().max().item() < 1e-4


@pytest.mark.parametrize("device", DEVICES)
def test_part_without_keys_weighs_nothing(device):
    torch.manual_seed(1)
    out_a = torch.randn(1, 3, 2, 16, dtype=torch.bfloat16, device=device)
    lse_a = torch.randn(1, 2, 3, device=device)
    out_b = torch.zeros_like(out_a)
    lse_b = torch.full_like(lse_a, float("inf"))
    out, lse = merge_attention(out_a, lse_a, out_b, lse_b)
    assert torch.equal(out, out_a) and torch.allclose(lse, lse_a)
    out, lse = merge_attention(out_b, lse_b, out_b, lse_b)
    assert torch.all(out == 0) and torch.all(torch.isposinf(lse))


def test_merge_compiles():
    torch.manual_seed(2)
    parts = [torch.randn(1, 4, 2, 16), torch.randn(1, 2, 4), torch.randn(1, 4, 2, 16), torch.randn(1, 2, 4)]
    eager = merge_attention(*parts)
    compiled = torch.compile(merge_attention, fullgraph=True, backend="aot_eager")(*parts)
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled))
