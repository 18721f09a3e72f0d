"""Copy weights from ``torch.nn`` reference modules into ours, and convert mask polarity.

PyTorch's boolean masks say True = *masked*; ours say True = *may attend*.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from scratchformer.nn import DecoderLayer, EncoderLayer, LayerNorm, MultiHeadAttention


@torch.no_grad()
def copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    d = theirs.embed_dim
    if ours.cross:
        ours.q_proj.weight.copy_(theirs.in_proj_weight[:d])
        ours.q_proj.bias.copy_(theirs.in_proj_bias[:d])
        ours.kv_proj.weight.copy_(theirs.in_proj_weight[d:])
        ours.kv_proj.bias.copy_(theirs.in_proj_bias[d:])
    else:
        ours.qkv_proj.weight.copy_(theirs.in_proj_weight)
        ours.qkv_proj.bias.copy_(theirs.in_proj_bias)
    ours.out_proj.load_state_dict(theirs.out_proj.state_dict())


@torch.no_grad()
def copy_norm(ours: LayerNorm, theirs: nn.LayerNorm) -> None:
    ours.weight.copy_(theirs.weight)
    ours.bias.copy_(theirs.bias)


def copy_feed_forward(ours: EncoderLayer, theirs: nn.Module) -> None:
    ours.feed_forward.w1.load_state_dict(theirs.linear1.state_dict())
    ours.feed_forward.w2.load_state_dict(theirs.linear2.state_dict())


def copy_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_norm(ours.self_attn_norm, theirs.norm1)
    copy_feed_forward(ours, theirs)
    copy_norm(ours.feed_forward_norm, theirs.norm2)


def copy_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    assert ours.cross_attn is not None and ours.cross_attn_norm is not None
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_norm(ours.self_attn_norm, theirs.norm1)
    copy_attention(ours.cross_attn, theirs.multihead_attn)
    copy_norm(ours.cross_attn_norm, theirs.norm2)
    copy_feed_forward(ours, theirs)
    copy_norm(ours.feed_forward_norm, theirs.norm3)


def torch_mask(may_attend: Tensor) -> Tensor:
    """Our mask (True = may attend) in PyTorch's polarity (True = masked)."""
    return ~may_attend.bool()


def lengths_mask(lengths: list[int], length: int) -> Tensor:
    """``(batch, length)`` mask of real tokens, right padding."""
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
