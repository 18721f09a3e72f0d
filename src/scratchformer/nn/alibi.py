"""Attention with linear biases (ALiBi; Press et al., 2022), as BLOOM and MosaicBERT use it.

No positions are added to the token vectors. Instead each head adds ``-slope * distance``
to the score of a query and a key, with a fixed slope per head: attention prefers near keys,
each head at its own scale, and no table limits the length.

The bias is ``-slope * |key - query|``. In a causal decoder the keys allowed are those at or
before the query, where this is ``slope * (key - query)``, the paper's bias. BLOOM adds
``slope * key`` instead, which differs from it by ``slope * query``, the same for every key
of a query, so the softmax gives the same weights; ours is zero on the diagonal, so that
scores do not grow with the position (which would cost precision in bf16). An encoder
(MosaicBERT) sees keys on both sides, at the same penalty for the same distance.

Distances are counted in key indices: the queries are the last ``q_len`` of ``k_len`` keys
(a cache's earlier keys come first). They equal position differences, as a row's positions
run on one by one (left padding shifts a row's positions and indices alike).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .positional import Positioning


def alibi_slopes(n_heads: int) -> Tensor:
    """The heads' slopes: ``2^(-8 i / n)`` for heads ``i = 1 .. n`` when ``n`` is a power of
    two. Otherwise (the paper's rule, and BLOOM's ``build_alibi_tensor``) the slopes of the
    largest power of two ``m`` below ``n``, then for the other ``n - m`` heads the slopes of
    ``2 m`` heads at odd ``i`` (1, 3, 5, ...), which fall between the first ones."""

    def geometric(n: int) -> list[float]:
        return [2 ** (-8 * i / n) for i in range(1, n + 1)]

    m = 2 ** math.floor(math.log2(n_heads))
    return torch.tensor(geometric(m) + geometric(2 * m)[0::2][: n_heads - m])


class ALiBi(nn.Module):
    """The score bias of every head, ``(1, heads, q_len, k_len)``; the slopes are a
    non-persistent buffer (a function of the number of heads, not a weight). A
    :class:`~.positional.PositionalAttention`."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def forward(self, q_len: int, k_len: int) -> Tensor:
        """``-slope * |key - query|`` of the last ``q_len`` of ``k_len`` positions (queries)
        against all of them (keys)."""
        keys = torch.arange(k_len, device=self.slopes.device)
        distance = (keys[-q_len:, None] - keys).abs()
        return -(self.slopes[:, None, None] * distance)[None]

    def positioning(self, positions: Tensor, k_len: int) -> Positioning:
        """The bias of the queries at ``positions`` (their number counts) and ``k_len``
        keys."""
        return Positioning(bias=self(positions.shape[-1], k_len))
