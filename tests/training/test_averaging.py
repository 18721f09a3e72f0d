"""The moving average of the weights against values computed by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from scratchformer.training.averaging import ema_rate, exponential_average


def test_the_rate_starts_high_and_settles_at_one_minus_the_decay() -> None:
    assert ema_rate(0.999, 1) == pytest.approx(1 - 2 / 11)
    assert ema_rate(0.5, 8) == pytest.approx(0.5)  # (1 + 8) / (10 + 8) reaches the decay
    assert ema_rate(0.9, 10_000) == pytest.approx(0.1)


class Scalar(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.register_buffer("count", torch.zeros(()))


def test_the_average_follows_the_recursion_and_the_buffers_follow_the_model() -> None:
    model = Scalar()
    average = exponential_average(model, decay=0.5)
    expected = []
    for step, weight in enumerate([4.0, 2.0, 6.0], start=1):
        with torch.no_grad():
            model.weight.fill_(weight)
            model.count.fill_(step)
        average.update_parameters(model)
        expected.append(average.module.weight.item())
    # a1 = w1; a2 = a1 + (9/11)(w2 - a1) = 26/11; a3 = a2 + (3/4)(w3 - a2) = 56/11
    assert expected == pytest.approx([4.0, 26 / 11, 56 / 11], abs=1e-6)
    assert average.module.count.item() == 3


def test_tied_weights_stay_tied_in_the_average() -> None:
    model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight
    average = exponential_average(model, decay=0.9)
    average.update_parameters(model)
    assert average.module[0].weight is average.module[1].weight
