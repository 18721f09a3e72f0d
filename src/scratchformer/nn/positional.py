"""What a positional scheme hands a stack's attention layers.

A scheme either adds vectors to the token embeddings (sinusoidal, learned: a module the
:class:`~.embedding.Embedding` applies) or tells attention where queries and keys are: it
rotates them (rotary) or adds a bias to their scores (ALiBi). The second kind is a
:class:`PositionalAttention`, which a stack asks once per forward for the
:class:`Positioning` that every layer's self-attention then uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

from torch import Tensor

if TYPE_CHECKING:
    from .rotary import Rotation


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
