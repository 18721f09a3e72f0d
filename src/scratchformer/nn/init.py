"""Initial weights drawn in place."""

from __future__ import annotations

from torch import Tensor, nn


def normal_(weight: Tensor, std: float) -> Tensor:
    """Fill ``weight`` from N(0, std²), as ``torch.nn.init.normal_`` does; a tensor on the
    meta device (a model built only to check shapes) holds no values and is left as it
    is, since PyTorch's meta ``normal_`` imports its compiler, which a command's start-up
    should not wait for."""
    if weight.is_meta:
        return weight
    return nn.init.normal_(weight, std=std)
