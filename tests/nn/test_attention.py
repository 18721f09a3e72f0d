import math

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, Qwen2Config
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention

from scratchformer.nn import (
    MultiHeadAttention,
    RotaryEmbedding,
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


HF_ATTENTION = {
    "llama": (LlamaConfig, LlamaAttention, dict(bias=False)),
    "qwen2": (Qwen2Config, Qwen2Attention, dict(bias=False, qkv_bias=True)),
}


@pytest.mark.parametrize("family", HF_ATTENTION)
@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_grouped_query_attention_matches_hugging_face(family: str, n_kv_heads: int) -> None:
    """Llama's attention (no biases) and Qwen2's (query, key and value biases), rotary
    positions, a padding and causal mask, multi-head, grouped-query and multi-query."""
    torch.manual_seed(0)
    config_class, attention_class, options = HF_ATTENTION[family]
    config = config_class(hidden_size=32, num_attention_heads=4, num_key_value_heads=n_kv_heads)
    config._attn_implementation = "eager"
    theirs = attention_class(config, layer_idx=0).eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.normal_(std=0.3)
    ours = MultiHeadAttention(32, 4, n_kv_heads=n_kv_heads, **options).eval()
    weights = {name: p for name, p in theirs.state_dict().items()}
    parts = [f"{part}_proj" for part in "qkv"]
    state = {
        "qkv_proj.weight": torch.cat([weights[f"{part}.weight"] for part in parts]),
        "out_proj.weight": weights["o_proj.weight"],
    }
    if options.get("qkv_bias"):
        state["qkv_proj.bias"] = torch.cat([weights[f"{part}.bias"] for part in parts])
    ours.load_state_dict(state)
    x, positions = torch.randn(3, 7, 32), torch.arange(7)[None].expand(3, -1)
    may_attend = combine_masks(padding_mask(lengths_mask([7, 5, 2], 7)), causal_mask(7))
    additive = torch.zeros(may_attend.shape).masked_fill(~may_attend, torch.finfo().min)
    cos_sin = LlamaRotaryEmbedding(config)(x, positions)
    expected, expected_weights = theirs(x, cos_sin, additive)
    rotation = RotaryEmbedding(8)(positions)
    out, weights = ours(x, mask=may_attend, need_weights=True, rotation=rotation)
    torch.testing.assert_close(out, expected, atol=TOL, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=TOL, rtol=0)
    fast, _ = ours(x, mask=may_attend, rotation=rotation)
    torch.testing.assert_close(fast, expected, atol=TOL, rtol=0)


def test_grouped_heads_share_keys_and_values_in_consecutive_groups() -> None:
    """With the key/value heads of a grouped attention copied into every head of a plain
    one (query heads 0 and 1 read kv head 0, ...), the two give the same output."""
    grouped, plain = MultiHeadAttention(32, 4, n_kv_heads=2), MultiHeadAttention(32, 4)
    q, k, v = grouped.qkv_proj.weight.split([32, 16, 16])
    repeat = lambda w: w.view(2, 8, 32).repeat_interleave(2, dim=0).reshape(32, 32)  # noqa: E731
    with torch.no_grad():
        plain.qkv_proj.weight.copy_(torch.cat([q, repeat(k), repeat(v)]))
        plain.qkv_proj.bias.copy_(torch.cat([grouped.qkv_proj.bias[:32], torch.zeros(64)]))
        grouped.qkv_proj.bias[32:].zero_()
        plain.out_proj.load_state_dict(grouped.out_proj.state_dict())
    assert grouped.qkv_proj.weight.shape == (64, 32)
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(grouped(x)[0], plain(x)[0], atol=1e-6, rtol=0)


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


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
@pytest.mark.parametrize("name", MASKS)
def test_reference_path_equals_fast_path(name: str, n_kv_heads: int | None) -> None:
    attention = MultiHeadAttention(32, 4, n_kv_heads=n_kv_heads).eval()
    x = torch.randn(3, 6, 32)
    mask = MASKS[name]()
    reference, weights = attention(x, mask=mask, need_weights=True)
    fast, none = attention(x, mask=mask)
    assert none is None and weights is not None
    torch.testing.assert_close(fast, reference, atol=1e-6, rtol=0)
    assert torch.isfinite(fast).all()


def test_score_bias_is_added_before_the_softmax_by_hand() -> None:
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    bias = torch.randn(1, 3, 5)
    mask = torch.rand(2, 3, 5) > 0.3
    mask[..., 0] = True
    out, weights = scaled_dot_product_attention(q, k, v, mask, bias=bias)
    scores = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(4) + bias
    expected = torch.where(mask, scores.exp(), torch.zeros(()))
    expected = expected / expected.sum(-1, keepdim=True)
    torch.testing.assert_close(weights, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, expected @ v, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("n_kv_heads", [None, 1])
@pytest.mark.parametrize("name", MASKS)
def test_score_bias_reference_path_equals_fast_path(name: str, n_kv_heads: int | None) -> None:
    """The fused path folds the mask into the float mask that carries the bias; a query
    with no key allowed still gets zeros, and gradients stay finite."""
    attention = MultiHeadAttention(32, 4, n_kv_heads=n_kv_heads).eval()
    x = torch.randn(3, 6, 32, requires_grad=True)
    bias = torch.randn(1, 4, 6, 6)
    mask = MASKS[name]()
    reference, _ = attention(x, mask=mask, need_weights=True, bias=bias)
    fast, _ = attention(x, mask=mask, bias=bias)
    torch.testing.assert_close(fast, reference, atol=1e-6, rtol=0)
    unbiased, _ = attention(x, mask=mask)
    assert not torch.allclose(fast, unbiased, atol=1e-3)
    fast.sum().backward()
    assert torch.isfinite(fast).all() and torch.isfinite(x.grad).all()
    if name == "fully masked rows":
        assert torch.equal(fast[1:], torch.zeros_like(fast[1:]) + attention.out_proj.bias)


def test_score_bias_with_the_causal_flag_equals_an_explicit_causal_mask() -> None:
    attention = MultiHeadAttention(16, 2).eval()
    q, k, v = attention.project(torch.randn(2, 5, 16))
    bias = torch.randn(2, 2, 5, 5)
    explicit, _ = attention.attend(q, k, v, mask=causal_mask(5), need_weights=True, bias=bias)
    implicit, _ = attention.attend(q, k, v, is_causal=True, bias=bias)
    torch.testing.assert_close(implicit, explicit, atol=1e-6, rtol=0)
    last, _ = attention.attend(q[:, :, 3:], k, v, is_causal=True, bias=bias[:, :, 3:])
    torch.testing.assert_close(last, explicit[:, :, 3:], atol=1e-6, rtol=0)


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


@pytest.mark.parametrize("n_kv_heads", [None, 1])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_causal_attention_never_reads_later_positions_also_when_training(
    dropout: float, n_kv_heads: int | None
) -> None:
    """Changing the last position's input leaves every earlier output as it was, in training
    mode too (the same dropout draws), where attention dropout takes the written-out path."""
    attention = MultiHeadAttention(16, 2, dropout=dropout, n_kv_heads=n_kv_heads).train()
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
    with pytest.raises(ValueError, match="n_heads=8 is not divisible by n_kv_heads=3"):
        MultiHeadAttention(32, 8, n_kv_heads=3)
    with pytest.raises(ValueError, match="needs a source"):
        MultiHeadAttention(16, 2, cross=True)(torch.randn(1, 2, 16))
    with pytest.raises(ValueError, match="takes no source"):
        MultiHeadAttention(16, 2)(torch.randn(1, 2, 16), torch.randn(1, 2, 16))
