"""An attention matrix as a heatmap, tokens on the axes (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure
from torch import Tensor


def attention_heatmap(
    weights: Tensor, queries: Sequence[str], keys: Sequence[str], title: str = ""
) -> Figure:
    """A figure of ``weights`` ``(len(queries), len(keys))``: row i is what query token i
    attends to (rows sum to one). Save it with ``figure.savefig("attn.png")``."""
    if tuple(weights.shape) != (len(queries), len(keys)):
        raise ValueError(
            f"weights of shape {tuple(weights.shape)} do not fit {len(queries)} query and "
            f"{len(keys)} key labels"
        )
    size = 0.35
    width, height = max(4.5, 1.5 + size * len(keys)), max(3.0, 1.2 + size * len(queries))
    figure = Figure(figsize=(width, height))
    axes = figure.add_subplot()
    image = axes.imshow(
        weights.detach().float().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto"
    )
    axes.set_xticks(range(len(keys)), labels=list(keys), rotation=90)
    axes.set_yticks(range(len(queries)), labels=list(queries))
    axes.set_xlabel("attends to (keys)")
    axes.set_ylabel("queries")
    if title:
        axes.set_title(title, fontsize=10)
    figure.colorbar(image, ax=axes, fraction=0.05)
    figure.tight_layout()
    return figure
