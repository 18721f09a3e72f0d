"""What a positional scheme hands a stack's attention layers.

A scheme either adds vectors to the token embeddings (sinusoidal, learned: a module the
:class:`~.embedding.Embedding` applies) or tells attention where queries and keys are: it
rotates them (rotary: a :class:`Rotation`, whose angles :mod:`.rotary` computes) or adds a
bias to their scores (ALiBi). The second kind is a :class:`PositionalAttention`, which a
stack asks once per forward for the :class:`Positioning` that every layer's self-attention
then uses.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
from torch import Tensor


class Rotation(NamedTuple):
    """Cosines and sines of the angles of some positions: ``(batch or 1, 1, seq, d_head / 2)``
    each, broadcasting over the heads of ``(batch, heads, seq, d_head)`` queries and keys."""

    cos: Tensor
    sin: Tensor

    def apply(self, x: Tensor) -> Tensor:
        """``x`` (queries or keys, ``(batch, heads, seq, d_head)``) rotated: dimension ``i``
        paired with ``i + d_head / 2``, each pair turned by its angle."""
        x1, x2 = x.chunk(2, dim=-1)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Positioning(NamedTuple):
    """Positions as self-attention sees them: a ``rotation`` of the queries and keys, and a
    ``bias`` ``(batch or 1, heads, q_len, k_len)`` added to the scores; either may be
    ``None``."""

    rotation: Rotation | None = None
    bias: Tensor | None = None


class PositionalAttention(Protocol):
    """A scheme that positions attention rather than the embeddings."""

    def positioning(self, positions: Tensor, k_len: int) -> Positioning:
        """The positioning of queries at ``positions`` (ids, ``(seq,)`` or ``(batch,
        seq)``) attending to ``k_len`` keys, the last ``seq`` of which are the queries' own
        (a cache's keys of earlier positions come first)."""
        ...
