from functools import partial

import pytest
import torch
from torch import nn

from scratchformer.nn import (
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    MultiHeadAttention,
    causal_mask,
    combine_masks,
    padding_mask,
)
from scratchformer.nn.packing import Packing
from torch_reference import copy_decoder_layer, copy_encoder_layer, lengths_mask, torch_mask

TOL = 1e-5
D, HEADS, FF = 32, 4, 64
VARIANTS = [
    pytest.param(norm_first, activation, id=f"{'pre' if norm_first else 'post'}-LN-{activation}")
    for norm_first in (False, True)
    for activation in ("relu", "gelu")
]


def encoder_layer(
    activation: str = "relu", norm_first: bool = False, dropout: float = 0.1
) -> EncoderLayer:
    """The layer of ``torch.nn.TransformerEncoderLayer(D, HEADS, FF, dropout, ...)``."""
    return EncoderLayer(
        MultiHeadAttention(D, HEADS),
        FeedForward(D, FF, dropout, activation),
        partial(LayerNorm, D),
        dropout=dropout,
        norm_first=norm_first,
    )


def decoder_layer(
    activation: str = "relu", norm_first: bool = False, cross_attention: bool = True
) -> DecoderLayer:
    """The layer of ``torch.nn.TransformerDecoderLayer(D, HEADS, FF, 0.1, ...)``, or without
    cross-attention that of a decoder-only model."""
    return DecoderLayer(
        MultiHeadAttention(D, HEADS),
        MultiHeadAttention(D, HEADS, cross=True) if cross_attention else None,
        FeedForward(D, FF, 0.1, activation),
        partial(LayerNorm, D),
        dropout=0.1,
        norm_first=norm_first,
    )


def _randomise_norms(module: nn.Module) -> None:
    """Non-trivial LayerNorm parameters, so that a swapped norm cannot go unnoticed."""
    with torch.no_grad():
        for child in module.modules():
            if isinstance(child, nn.LayerNorm):
                child.weight.uniform_(0.5, 1.5)
                child.bias.normal_(std=0.1)


@pytest.mark.parametrize(("norm_first", "activation"), VARIANTS)
def test_encoder_layer_matches_torch(norm_first: bool, activation: str) -> None:
    theirs = nn.TransformerEncoderLayer(
        D, HEADS, FF, dropout=0.1, activation=activation, batch_first=True, norm_first=norm_first
    ).eval()
    _randomise_norms(theirs)
    ours = encoder_layer(activation, norm_first).eval()
    copy_encoder_layer(ours, theirs)
    x = torch.randn(3, 6, D)
    real = lengths_mask([6, 4, 2], 6)
    expected = theirs(x, src_key_padding_mask=torch_mask(real))
    for need_weights in (False, True):
        out, _ = ours(x, mask=padding_mask(real), need_weights=need_weights)
        torch.testing.assert_close(out[real], expected[real], atol=TOL, rtol=0)
    packing = Packing.of(real)
    packed, _ = ours(packing.pack(x), mask=padding_mask(real), packing=packing)
    torch.testing.assert_close(packed, expected[real], atol=TOL, rtol=0)


@pytest.mark.parametrize(("norm_first", "activation"), VARIANTS)
def test_decoder_layer_matches_torch(norm_first: bool, activation: str) -> None:
    theirs = nn.TransformerDecoderLayer(
        D, HEADS, FF, dropout=0.1, activation=activation, batch_first=True, norm_first=norm_first
    ).eval()
    _randomise_norms(theirs)
    ours = decoder_layer(activation, norm_first).eval()
    copy_decoder_layer(ours, theirs)
    x, memory = torch.randn(3, 5, D), torch.randn(3, 7, D)
    tgt_real, src_real = lengths_mask([5, 3, 1], 5), lengths_mask([7, 2, 5], 7)
    expected = theirs(
        x,
        memory,
        tgt_mask=torch_mask(causal_mask(5)),
        tgt_key_padding_mask=torch_mask(tgt_real),
        memory_key_padding_mask=torch_mask(src_real),
    )
    self_mask = combine_masks(padding_mask(tgt_real), causal_mask(5))
    for need_weights in (False, True):
        out, self_weights, cross_weights = ours(
            x,
            memory,
            self_mask=self_mask,
            memory_mask=padding_mask(src_real),
            is_causal=False,
            need_weights=need_weights,
        )
        torch.testing.assert_close(out[tgt_real], expected[tgt_real], atol=TOL, rtol=0)
    assert self_weights.shape == (3, HEADS, 5, 5) and cross_weights.shape == (3, HEADS, 5, 7)
    # padding-free targets: the is_causal flag alone gives the same as torch's causal mask
    expected = theirs(x, memory, tgt_mask=torch_mask(causal_mask(5)), tgt_is_causal=True)
    out, _, _ = ours(x, memory, is_causal=True)
    torch.testing.assert_close(out, expected, atol=TOL, rtol=0)


def test_decoder_layer_without_cross_attention_is_a_causal_encoder_layer() -> None:
    decoder = decoder_layer(cross_attention=False).eval()
    encoder = encoder_layer().eval()
    encoder.load_state_dict(decoder.state_dict())
    x = torch.randn(2, 5, D)
    out, _, cross = decoder(x)
    assert cross is None
    torch.testing.assert_close(out, encoder(x, is_causal=True)[0])
    with pytest.raises(ValueError, match="needs `memory`"):
        decoder_layer()(x)


def test_dropout_is_active_in_training_on_every_sublayer() -> None:
    layer = encoder_layer(dropout=0.5)
    x = torch.randn(2, 5, D)
    assert not torch.allclose(layer(x)[0], layer(x)[0])
    layer.eval()
    torch.testing.assert_close(layer(x)[0], layer(x)[0])


SELF_ATTENTION = ["self_attn.qkv_proj.weight", "self_attn.qkv_proj.bias"]
SELF_ATTENTION += ["self_attn.out_proj.weight", "self_attn.out_proj.bias"]
SELF_ATTENTION += ["self_attn_norm.weight", "self_attn_norm.bias"]
FEED_FORWARD = ["feed_forward.w1.weight", "feed_forward.w1.bias"]
FEED_FORWARD += ["feed_forward.w2.weight", "feed_forward.w2.bias"]
FEED_FORWARD += ["feed_forward_norm.weight", "feed_forward_norm.bias"]
CROSS_ATTENTION = ["cross_attn.q_proj.weight", "cross_attn.q_proj.bias"]
CROSS_ATTENTION += ["cross_attn.kv_proj.weight", "cross_attn.kv_proj.bias"]
CROSS_ATTENTION += ["cross_attn.out_proj.weight", "cross_attn.out_proj.bias"]
CROSS_ATTENTION += ["cross_attn_norm.weight", "cross_attn_norm.bias"]


def test_parameter_names_and_order_are_those_of_checkpoints() -> None:
    """Checkpoints, their optimizer states (by parameter order) and the Hugging Face weight
    mapping depend on these names, in this order."""
    for norm_first in (False, True):
        layers = {
            "encoder": encoder_layer(norm_first=norm_first),
            "decoder": decoder_layer(norm_first=norm_first),
            "decoder-only": decoder_layer(norm_first=norm_first, cross_attention=False),
        }
        expected = {
            "encoder": SELF_ATTENTION + FEED_FORWARD,
            "decoder": SELF_ATTENTION + FEED_FORWARD + CROSS_ATTENTION,
            "decoder-only": SELF_ATTENTION + FEED_FORWARD,
        }
        for kind, layer in layers.items():
            assert [name for name, _ in layer.named_parameters()] == expected[kind], kind
            assert list(layer.state_dict()) == expected[kind], kind
