"""T5's relative position bias (Raffel et al., 2020, sec. 2.1; Shaw et al., 2018).

No positions are added to the token vectors. Each head adds to the score of a query and a
key a learned scalar of the bucket of their distance ``key - query``: one bucket for each
distance below half the buckets, then buckets that widen logarithmically up to
``max_distance``, beyond which all distances share the last bucket. In the encoder
(bidirectional) half the buckets are for keys before the query, half for keys after it;
in the decoder's self-attention (causal) all are for keys at or before it, as later keys
are masked anyway. Cross-attention has no bias.

Distances are counted in key indices: the queries are the last ``q_len`` of ``k_len`` keys
(a cache's earlier keys come first), as in :mod:`.alibi`. T5 keeps the table in the first
layer of a stack and hands the bias on to the others; here the stack owns it and asks for
the bias once a forward (:class:`~.positional.PositionalAttention`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .positional import Positioning


def relative_bucket(
    distance: Tensor, num_buckets: int, max_distance: int, bidirectional: bool
) -> Tensor:
    """The bucket of each distance ``key - query``, in ``[0, num_buckets)``.

    Bidirectional: keys after the query take the upper half of the buckets, and each half
    is bucketed by the absolute distance. Causal: keys after the query share bucket 0 with
    the query itself. Of the ``n`` buckets of a direction, distances ``d < n / 2`` have a
    bucket each, ``d``; larger ones share ``n / 2 + floor(log(d / (n / 2)) / log(max_distance
    / (n / 2)) * n / 2)``, at most ``n - 1``."""
    if bidirectional:
        num_buckets //= 2
        offset = (distance > 0).long() * num_buckets
        distance = distance.abs()
    else:
        offset = torch.zeros_like(distance)
        distance = (-distance).clamp(min=0)
    exact = num_buckets // 2
    # in float32, in this order of operations, as T5 computes it: the buckets of distances
    # near a boundary depend on it (distance 0 is clamped only to keep log finite: exact)
    scaled = torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    far = (exact + (scaled * (num_buckets - exact)).long()).clamp(max=num_buckets - 1)
    return offset + torch.where(distance < exact, distance, far)


class RelativePositionBias(nn.Module):
    """The score bias of every head, ``(1, heads, q_len, k_len)``, looked up in a learned
    table ``weight`` ``(num_buckets, heads)`` by :func:`relative_bucket`. A
    :class:`~.positional.PositionalAttention`; the table starts at zeros (the model's
    initialisation draws it)."""

    def __init__(
        self, n_heads: int, num_buckets: int, max_distance: int, bidirectional: bool
    ) -> None:
        super().__init__()
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.weight = nn.Parameter(torch.zeros(num_buckets, n_heads))

    def forward(self, q_len: int, k_len: int) -> Tensor:
        """The bias of the last ``q_len`` of ``k_len`` positions (queries) against all of
        them (keys)."""
        keys = torch.arange(k_len, device=self.weight.device)
        distance = keys - keys[-q_len:, None]
        buckets = relative_bucket(distance, self.num_buckets, self.max_distance, self.bidirectional)
        return self.weight[buckets].permute(2, 0, 1)[None]

    def positioning(self, positions: Tensor, k_len: int) -> Positioning:
        """The bias of the queries at ``positions`` (their number counts) and ``k_len``
        keys."""
        return Positioning(bias=self(positions.shape[-1], k_len))

    def extra_repr(self) -> str:
        direction = "bidirectional" if self.bidirectional else "causal"
        return (
            f"heads={self.weight.shape[1]}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, {direction}"
        )
