"""Attention as heatmaps, tokens on the axes: one matrix, or a grid of layers x heads
(matplotlib figures, no display needed)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from torch import Tensor

from .maps import AttentionMaps

MAX_LABELS = 48
"""Tick labels on an axis at most; longer inputs show every k-th token (with a warning)."""
COLOUR_MAP = "viridis"
KIND_TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "cross-attention (output tokens attend to source tokens)",
}


def attention_heatmap(
    weights: Tensor, queries: Sequence[str], keys: Sequence[str], title: str = ""
) -> Figure:
    """A figure of ``weights`` ``(len(queries), len(keys))``: row i is what query token i
    attends to (rows sum to one). Save it with ``save_figure(figure, "attn.png")``."""
    if tuple(weights.shape) != (len(queries), len(keys)):
        raise ValueError(
            f"weights of shape {tuple(weights.shape)} do not fit {len(queries)} query and "
            f"{len(keys)} key labels"
        )
    _warn_if_long(queries, keys)
    width = max(4.5, 2.0 + 0.3 * min(len(keys), MAX_LABELS))
    height = max(3.0, 1.6 + 0.3 * min(len(queries), MAX_LABELS))
    figure = Figure(figsize=(width, height))
    axes = figure.add_subplot()
    image = _draw(axes, weights, queries, keys, x_labels=True, y_labels=True)
    axes.set_xlabel("attends to (keys)")
    axes.set_ylabel("queries")
    if title:
        axes.set_title(title, fontsize=10)
    figure.colorbar(image, ax=axes, fraction=0.05)
    figure.tight_layout()
    return figure


def attention_grid(
    maps: AttentionMaps,
    kind: str,
    layer: int | None = None,
    head: int | None = None,
    title: str | None = None,
) -> Figure:
    """One heatmap per layer (rows) and head (columns) of one kind of attention; ``layer``
    and / or ``head`` (0-based) narrow it to one row, one column or one picture. Tokens
    label the outer axes; one colour scale (0 to 1) serves every panel."""
    if kind not in maps.weights:
        raise ValueError(f"this model has no {kind} attention; it has {', '.join(maps.kinds)}")
    n_layers, n_heads = maps.weights[kind].shape[:2]
    layers = range(n_layers) if layer is None else [layer]
    heads = range(n_heads) if head is None else [head]
    queries, keys = maps.queries[kind], maps.keys[kind]
    panels = {(i, h): maps.select(kind, i, h) for i in layers for h in heads}
    title = KIND_TITLES[kind] if title is None else title
    if len(panels) == 1:
        ((i, h), weights), *_ = panels.items()
        return attention_heatmap(weights, queries, keys, f"{title}, layer {i}, head {h}")

    _warn_if_long(queries, keys)
    side = min(3.2, max(1.4, 0.09 * max(len(queries), len(keys))))
    width = 1.6 + side * len(heads) + (0.9 if len(keys) > 1 else 0.0)
    figure = Figure(figsize=(width, 1.2 + side * len(layers)), layout="constrained")
    grid = figure.subplots(len(layers), len(heads), squeeze=False)
    for row, i in enumerate(layers):
        for column, h in enumerate(heads):
            axes = grid[row][column]
            last_row, first_column = row == len(layers) - 1, column == 0
            image = _draw(axes, panels[i, h], queries, keys, last_row, first_column)
            if row == 0:
                axes.set_title(f"head {h}", fontsize=9)
            if first_column:
                axes.set_ylabel(f"layer {i}", fontsize=9)
    figure.suptitle(title, fontsize=11)
    figure.colorbar(image, ax=grid, fraction=0.03, shrink=0.8)
    return figure


def _draw(
    axes: Axes,
    weights: Tensor,
    queries: Sequence[str],
    keys: Sequence[str],
    x_labels: bool,
    y_labels: bool,
):
    """Draw one matrix on ``axes`` (colour scale 0 to 1) with thinned token labels."""
    image = axes.imshow(
        weights.detach().float().cpu().numpy(),
        cmap=COLOUR_MAP,
        vmin=0.0,
        vmax=1.0,
        aspect="auto",
        interpolation="nearest",
    )
    x_ticks, x_text = _thin(keys)
    y_ticks, y_text = _thin(queries)
    font = 8 if max(len(keys), len(queries)) <= 24 else 6
    axes.set_xticks(x_ticks, labels=x_text, rotation=90, fontsize=font)
    axes.set_yticks(y_ticks, labels=y_text, fontsize=font)
    axes.tick_params(labelbottom=x_labels, labelleft=y_labels)
    return image


def _warn_if_long(queries: Sequence[str], keys: Sequence[str]) -> None:
    longest = max(len(queries), len(keys))
    if longest > MAX_LABELS:
        step = math.ceil(longest / MAX_LABELS)
        warnings.warn(
            f"{longest} tokens are too many to label: the picture labels one in {step}",
            stacklevel=3,
        )


def _thin(tokens: Sequence[str]) -> tuple[list[int], list[str]]:
    """Tick positions and labels: every token, or every k-th of a long input."""
    step = math.ceil(len(tokens) / MAX_LABELS)
    ticks = list(range(0, len(tokens), step))
    return ticks, [tokens[i] for i in ticks]
