"""The sinusoidal positional encoding of the paper as an image: positions down, encoding
dimensions across; slow waves on the right, fast ones on the left."""

from __future__ import annotations

from matplotlib.figure import Figure

from ..nn.embedding import sinusoidal_table


def positional_encoding_figure(d_model: int = 128, length: int = 100) -> Figure:
    """``PE(pos, 2i) = sin(pos / 10000^(2i/d))`` and ``PE(pos, 2i+1) = cos(...)`` for
    ``length`` positions, drawn on a diverging colour scale from -1 to 1."""
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model={d_model} must be an even number of at least 2")
    if length < 1:
        raise ValueError(f"length={length} must be at least 1")
    table = sinusoidal_table(length, d_model)
    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    image = axes.imshow(table.numpy(), cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
    axes.set_xlabel("dimension (even: sine, odd: cosine)")
    axes.set_ylabel("position")
    axes.set_title(f"sinusoidal positional encoding, d_model={d_model}, {length} positions")
    figure.colorbar(image, ax=axes, fraction=0.05)
    return figure
