"""The positional-encoding picture shows the paper's table."""

from __future__ import annotations

import math

import pytest
import torch

from scratchformer.viz import positional_encoding_figure


def test_picture_shows_the_sinusoidal_table() -> None:
    figure = positional_encoding_figure(d_model=16, length=30)
    shown = torch.as_tensor(figure.axes[0].images[0].get_array())
    assert shown.shape == (30, 16)
    # PE(pos=2, 2i) = sin(2 / 10000^(2i/16)), PE(pos=2, 2i+1) = cos(...)
    assert shown[2, 0].item() == pytest.approx(math.sin(2), abs=1e-6)
    assert shown[2, 1].item() == pytest.approx(math.cos(2), abs=1e-6)
    assert shown[2, 4].item() == pytest.approx(math.sin(2 / 10000 ** (4 / 16)), abs=1e-6)


def test_bad_sizes_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="d_model=7 must be an even number"):
        positional_encoding_figure(d_model=7)
    with pytest.raises(ValueError, match="length=0 must be at least 1"):
        positional_encoding_figure(length=0)
