import math

import pytest
import torch
from torch import nn

from scratchformer.nn import (
    MultiHeadAttention,
    causal_mask,
    combine_masks,
    padding_mask,
    scaled_dot_product_attention,
)
from torch_reference import copy_attention, lengths_mask, torch_mask

TOL = 1e-5


def test_worked_example_of_the_tutorials() -> None:
    q = torch.tensor([[1.0, 0, 1], [0, 1, 1]])
    k = torch.tensor([[1.0, 2, 1], [2, 1, 0]])
    v = torch.tensor([[0.5, 0.8], [0.2, 0.3]])
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(
        weights, torch.tensor([[0.5, 0.5], [0.7604, 0.2396]]), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(
        out, torch.tensor([[0.35, 0.55], [0.4281, 0.6802]]), atol=1e-4, rtol=0
    )


def test_weights_by_hand_with_mask() -> None:
    q = torch.randn(2, 3, 4)
    k = torch.randn(2, 5, 4)
    v = torch.randn(2, 5, 6)
    mask = torch.rand(2, 3, 5) > 0.3
    mask[..., 0] = True
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    scores = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(4)
    expected = torch.where(mask, scores.exp(), torch.zeros(()))
    expected = expected / expected.sum(-1, keepdim=True)
    torch.testing.assert_close(weights, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, expected @ v, atol=1e-6, rtol=1e-5)


def test_row_with_nothing_to_attend_gives_zeros_not_nan() -> None:
    q, k, v = torch.randn(3, 2, 4, 8).unbind(0)
    q.requires_grad_(True)
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    mask[1] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.equal(weights[1], torch.zeros_like(weights[1]))
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_dropout_changes_output_but_not_returned_weights() -> None:
    q, k, v = torch.randn(3, 2, 5, 8).unbind(0)
    _, clean = scaled_dot_product_attention(q, k, v)
    out, weights = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(weights, clean)
    assert not torch.allclose(out, clean @ v)


def _mha_pair(d: int = 32, heads: int = 4, cross: bool = False):
    theirs = nn.MultiheadAttention(d, heads, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_bias.normal_()
        theirs.out_proj.bias.normal_()
    ours = MultiHeadAttention(d, heads, cross=cross).eval()
    copy_attention(ours, theirs)
    return ours, theirs


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_matches_torch(causal: bool) -> None:
    ours, theirs = _mha_pair()
    x = torch.randn(3, 7, 32)
    real = lengths_mask([7, 5, 2], 7)
    may_attend = combine_masks(padding_mask(real), causal_mask(7) if causal else None)
    expected, expected_weights = theirs(
        x,
        x,
        x,
        key_padding_mask=torch_mask(real),
        attn_mask=torch_mask(causal_mask(7)) if causal else None,
        need_weights=True,
        average_attn_weights=False,
    )
    for need_weights in (True, False):
        out, weights = ours(x, mask=may_attend, need_weights=need_weights)
        torch.testing.assert_close(out, expected, atol=TOL, rtol=0)
        if need_weights:
            torch.testing.assert_close(weights, expected_weights, atol=TOL, rtol=0)
    out, _ = ours(x, mask=padding_mask(real), is_causal=causal)
    torch.testing.assert_close(out, expected, atol=TOL, rtol=0)


def test_cross_attention_matches_torch() -> None:
    ours, theirs = _mha_pair(cross=True)
    x = torch.randn(2, 4, 32)
    memory = torch.randn(2, 6, 32)
    real = lengths_mask([6, 3], 6)
    expected, expected_weights = theirs(
        x, memory, memory, key_padding_mask=torch_mask(real), average_attn_weights=False
    )
    out, weights = ours(x, memory, mask=padding_mask(real), need_weights=True)
    torch.testing.assert_close(out, expected, atol=TOL, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=TOL, rtol=0)
    assert weights.shape == (2, 4, 4, 6)


MASKS = {
    "none": lambda: None,
    "padding": lambda: padding_mask(lengths_mask([6, 4, 1], 6)),
    "causal": lambda: causal_mask(6),
    "padding+causal": lambda: combine_masks(
        padding_mask(lengths_mask([6, 4, 1], 6)), causal_mask(6)
    ),
    "fully masked rows": lambda: torch.zeros(3, 1, 6, 6, dtype=torch.bool).index_fill(
        0, torch.tensor([0]), True
    ),
}


@pytest.mark.parametrize("name", MASKS)
def test_reference_path_equals_fast_path(name: str) -> None:
    attention = MultiHeadAttention(32, 4).eval()
    x = torch.randn(3, 6, 32)
    mask = MASKS[name]()
    reference, weights = attention(x, mask=mask, need_weights=True)
    fast, none = attention(x, mask=mask)
    assert none is None and weights is not None
    torch.testing.assert_close(fast, reference, atol=1e-6, rtol=0)
    assert torch.isfinite(fast).all()


def test_is_causal_equals_explicit_causal_mask_also_with_fewer_queries() -> None:
    attention = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    q, k, v = attention.project(x)
    explicit, _ = attention.attend(q, k, v, mask=causal_mask(5), need_weights=True)
    implicit, _ = attention.attend(q, k, v, is_causal=True)
    torch.testing.assert_close(implicit, explicit, atol=1e-6, rtol=0)
    # the last two queries against all five keys: what a cached decoder computes
    last, _ = attention.attend(q[:, :, 3:], k, v, is_causal=True)
    torch.testing.assert_close(last, explicit[:, :, 3:], atol=1e-6, rtol=0)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_causal_attention_never_reads_later_positions_also_when_training(dropout: float) -> None:
    """Changing the last position's input leaves every earlier output as it was, in training
    mode too (the same dropout draws), where attention dropout takes the written-out path."""
    attention = MultiHeadAttention(16, 2, dropout=dropout).train()
    x = torch.randn(2, 5, 16)
    changed = x.clone()
    changed[:, -1] += 1.0
    torch.manual_seed(0)
    before, _ = attention(x, is_causal=True)
    torch.manual_seed(0)
    after, _ = attention(changed, is_causal=True)
    torch.testing.assert_close(after[:, :-1], before[:, :-1], atol=1e-6, rtol=0)
    assert not torch.allclose(after[:, -1], before[:, -1])


def test_wrong_use_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="d_model=30 is not divisible by n_heads=8"):
        MultiHeadAttention(30, 8)
    with pytest.raises(ValueError, match="needs a source"):
        MultiHeadAttention(16, 2, cross=True)(torch.randn(1, 2, 16))
    with pytest.raises(ValueError, match="takes no source"):
        MultiHeadAttention(16, 2)(torch.randn(1, 2, 16), torch.randn(1, 2, 16))
