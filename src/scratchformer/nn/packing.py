"""Packed tokens: the real tokens of a padded batch, one after another.

Everything in a layer but attention works token by token (projections, feed-forward,
LayerNorm, dropout, residuals), so it can run on the packed ``(tokens, d_model)`` rows and
skip the padding. Attention alone needs the ``(batch, len)`` shape: it unpacks its
projected queries, keys and values, attends with the padding mask, and packs its output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a ``(batch, len)`` batch are."""

    index: Tensor
    """``(tokens,)``: positions of the real tokens in the flattened ``batch * len``."""
    batch: int
    length: int

    @classmethod
    def of(cls, attention_mask: Tensor) -> Packing:
        """From a ``(batch, len)`` mask, 1/True at real tokens."""
        batch, length = attention_mask.shape
        return cls(attention_mask.flatten().nonzero().squeeze(1), batch, length)

    def pack(self, x: Tensor) -> Tensor:
        """``(batch, len, ...)`` -> ``(tokens, ...)``."""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x: Tensor) -> Tensor:
        """``(tokens, ...)`` -> ``(batch, len, ...)``, zeros at padding."""
        padded = x.new_zeros(self.batch * self.length, *x.shape[1:])
        return padded.index_copy(0, self.index, x).view(self.batch, self.length, *x.shape[1:])


def packing_for(attention_mask: Tensor | None) -> Packing | None:
    """The packing of a batch that has padding to skip; ``None`` when it has none, or
    under ``torch.compile`` (whose graphs want shapes that do not depend on the data)."""
    if attention_mask is None or torch.compiler.is_compiling():
        return None
    if bool(attention_mask.all()):
        return None
    return Packing.of(attention_mask)
