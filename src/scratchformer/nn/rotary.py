"""Rotary position embedding (RoPE; Su et al., 2021), an alternative to the paper's added
positional encodings.

Positions are not added to the token vectors; instead every query and key is rotated by an
angle proportional to its position, pair of dimensions by pair of dimensions, at the
frequencies of the sinusoidal encoding. The dot product of a query at position ``m`` and a
key at ``n`` then depends on ``m - n`` only, so attention sees relative positions, and no
table limits the length. Dimension ``i`` is paired with ``i + d_head / 2`` (the layout of
GPT-NeoX and Llama, so weights and numbers carry over; RoFormer pairs ``2i`` with ``2i + 1``,
which a reordering of the query and key weights maps to this one).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from .embedding import inverse_frequencies


class Rotation(NamedTuple):
    """Cosines and sines of the angles of some positions: ``(batch or 1, 1, seq, d_head / 2)``
    each, broadcasting over the heads of ``(batch, heads, seq, d_head)`` queries and keys."""

    cos: Tensor
    sin: Tensor

    def apply(self, x: Tensor) -> Tensor:
        """``x`` (queries or keys, ``(batch, heads, seq, d_head)``) rotated."""
        x1, x2 = x.chunk(2, dim=-1)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class RotaryEmbedding(nn.Module):
    """The rotation of each position: dimension pair ``i`` turns by ``position * base^(-2i /
    d_head)`` radians. The inverse frequencies are a non-persistent buffer (a function of
    the shape, not a weight)."""

    def __init__(self, d_head: int, base: float = 10000.0) -> None:
        super().__init__()
        if d_head % 2:
            raise ValueError(f"rotary embeddings need an even head width, got d_head={d_head}")
        inv_freq = inverse_frequencies(d_head, base).float()
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: Tensor) -> Rotation:
        """``positions``: ``(seq,)`` or ``(batch, seq)`` position ids."""
        angles = positions.to(self.inv_freq.dtype)[..., None] * self.inv_freq
        angles = angles.expand(1, *angles.shape) if angles.dim() == 2 else angles
        return Rotation(angles.cos()[:, None], angles.sin()[:, None])
