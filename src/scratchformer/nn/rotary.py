"""Rotary position embedding (RoPE; Su et al., 2021), an alternative to the paper's added
positional encodings.

Positions are not added to the token vectors; instead every query and key is rotated by an
angle proportional to its position, pair of dimensions by pair of dimensions, at the
frequencies of the sinusoidal encoding. The dot product of a query at position ``m`` and a
key at ``n`` then depends on ``m - n`` only, so attention sees relative positions, and no
table limits the length. Dimension ``i`` is paired with ``i + d_head / 2`` (the layout of
GPT-NeoX and Llama, so weights and numbers carry over; RoFormer pairs ``2i`` with ``2i + 1``,
which a reordering of the query and key weights maps to this one).

The frequencies' base (``theta``) is configurable, and a :class:`RopeScaling` stretches the
frequencies so that a model reads contexts longer than those it was trained on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..registry import Registry
from .embedding import inverse_frequencies
from .positional import Positioning, Rotation


@dataclass(frozen=True)
class RopeScaling:
    """Stretched rotary frequencies. ``linear`` divides every frequency by ``factor``
    (position interpolation: position ``p`` turns as ``p / factor`` did). ``llama3``
    (Llama 3.1) divides only the low frequencies, those whose wavelength exceeds
    ``original_max_len / low_freq_factor``, keeps the high ones, whose wavelength is below
    ``original_max_len / high_freq_factor``, and blends the two linearly in between."""

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_len: int = 8192

    def __post_init__(self) -> None:
        ROPE_SCALINGS.check(self.kind)

    def apply(self, inv_freq: Tensor) -> Tensor:
        """The scaled inverse frequencies."""
        return ROPE_SCALINGS[self.kind](inv_freq, self)


ROPE_SCALINGS: Registry[Callable[[Tensor, RopeScaling], Tensor]] = Registry("rope_scaling")
"""``ModelConfig.rope_scaling`` -> how it scales the inverse frequencies."""


@ROPE_SCALINGS.register("linear")
def linear_scaling(inv_freq: Tensor, scaling: RopeScaling) -> Tensor:
    return inv_freq / scaling.factor


@ROPE_SCALINGS.register("llama3")
def llama3_scaling(inv_freq: Tensor, scaling: RopeScaling) -> Tensor:
    wavelength = 2 * math.pi / inv_freq
    # 0 at the longest wavelength that is scaled, 1 at the shortest that is kept
    kept = (scaling.original_max_len / wavelength - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    return torch.lerp(inv_freq / scaling.factor, inv_freq, kept.clamp(0.0, 1.0))


class RotaryEmbedding(nn.Module):
    """The rotation of each position: dimension pair ``i`` turns by ``position * base^(-2i /
    d_head)`` radians (frequencies scaled by ``scaling``, if given). The inverse
    frequencies are a non-persistent buffer (a function of the shape, not a weight). A
    :class:`~.positional.PositionalAttention`."""

    def __init__(
        self, d_head: int, base: float = 10000.0, scaling: RopeScaling | None = None
    ) -> None:
        super().__init__()
        if d_head % 2:
            raise ValueError(f"rotary embeddings need an even head width, got d_head={d_head}")
        # a table of d_head / 2 numbers, made on the CPU even when the model is built on the
        # meta device to check shapes: PyTorch's meta arange imports its compiler
        inv_freq = inverse_frequencies(d_head, base, device=torch.device("cpu"))
        inv_freq = (inv_freq if scaling is None else scaling.apply(inv_freq)).float()
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: Tensor) -> Rotation:
        """``positions``: ``(seq,)`` or ``(batch, seq)`` position ids."""
        angles = positions.to(self.inv_freq.dtype)[..., None] * self.inv_freq
        angles = angles.expand(1, *angles.shape) if angles.dim() == 2 else angles
        return Rotation(angles.cos()[:, None], angles.sin()[:, None])

    def positioning(self, positions: Tensor, k_len: int) -> Positioning:
        """The rotation of the queries at ``positions`` (the cache rotated earlier keys)."""
        return Positioning(rotation=self(positions))
