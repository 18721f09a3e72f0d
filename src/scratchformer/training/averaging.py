"""An exponential moving average of the weights (EMA): a smoother model than the last step's,
often a better one at the end of training, for the cost of one copy of the parameters."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel


def ema_rate(decay: float, updates: int) -> float:
    """How far the average moves towards the weights at update ``updates`` (counted from 1
    after the first, which copies them): ``1 - min(decay, (1 + updates) / (10 + updates))``.
    Early updates move it more, so that it soon forgets the random initial weights."""
    return 1.0 - min(decay, (1 + updates) / (10 + updates))


def exponential_average(model: nn.Module, decay: float) -> AveragedModel:
    """``torch.optim.swa_utils.AveragedModel`` of ``model`` with EMA updates at
    :func:`ema_rate`: call ``update_parameters(model)`` after each optimiser step; its
    ``module`` is the averaged model (parameters averaged, buffers copied from ``model``
    at each update). Its state dict (``module.*`` and ``n_averaged``) is all that resuming needs."""

    @torch.no_grad()
    def update(averaged: list[Tensor], current: list[Tensor], updates: Tensor) -> None:
        rate = ema_rate(decay, int(updates))
        for average, weight in zip(averaged, current, strict=True):
            average.lerp_(weight, rate)

    return AveragedModel(model, multi_avg_fn=update)
