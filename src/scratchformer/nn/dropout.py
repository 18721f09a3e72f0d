"""Dropout (paper sec. 5.4) with a cheaper random mask on the CPU.

On the CPU, ``F.dropout`` draws one random float per element, and that draw costs more than
the matmuls of a small layer. Here the keep-mask comes from 16-bit slices of 64-bit random
words (four elements per draw) and one comparison. The drop probability is rounded to a
multiple of 1/65536, and kept values are scaled by the inverse of the rounded keep rate, so
each output's expectation is its input. Other devices use ``F.dropout``'s fused kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_LEVELS = 1 << 16  # a 16-bit slice takes this many values, each equally likely


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Zero each element of ``x`` with probability ``p`` and scale the rest by ``1/(1-p)``;
    the identity when not ``training`` or ``p == 0``."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training=True)
    dropped_levels = round(p * _LEVELS)
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-(2**63), None)
    slices = words.view(torch.int16)[: x.numel()].view(x.shape)
    keep = slices >= dropped_levels - _LEVELS // 2
    scale = _LEVELS / (_LEVELS - dropped_levels)
    if x.dtype in (torch.float32, torch.float64):
        # one multiply forward and backward: the fastest form; converting the mask, then
        # scaling it in place, is faster than ``keep * scale``
        return x * keep.to(x.dtype).mul_(scale)
    # In bf16/fp16 a mask of scales would round the scale itself (1/0.9 -> 1.109 in bf16),
    # biasing every kept value alike; scaling element by element rounds each one instead.
    return torch.where(keep, x * scale, 0.0)


class Dropout(nn.Module):
    """:func:`dropout` as a module: active in training mode only."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
