"""Attention masks. One convention everywhere: boolean, ``True`` = may attend.

Masks broadcast to ``(batch, heads, q_len, k_len)``; combining masks is a logical AND.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(attention_mask: Tensor) -> Tensor:
    """Key mask ``(batch, 1, 1, k_len)`` from a ``(batch, k_len)`` mask of real tokens (1/True)."""
    return attention_mask.bool()[:, None, None, :]


def causal_mask(
    q_len: int,
    k_len: int | None = None,
    device: torch.device | None = None,
    window: int | None = None,
) -> Tensor:
    """``(q_len, k_len)`` lower-triangular mask; queries are the last ``q_len`` of ``k_len``
    positions, so query ``i`` may attend keys ``0 .. k_len - q_len + i`` (this is what a
    cached decoder needs when it feeds fewer queries than keys). With a sliding ``window``
    only the last ``window`` of those keys (its own among them), as in Mistral."""
    k_len = q_len if k_len is None else k_len
    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    mask = ones.tril(diagonal=k_len - q_len)
    return mask if window is None else mask.triu(diagonal=k_len - q_len - window + 1)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of the masks that are given; ``None`` when none is."""
    result = None
    for mask in masks:
        if mask is not None:
            result = mask if result is None else result & mask
    return result
