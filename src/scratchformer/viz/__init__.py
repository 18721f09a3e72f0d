"""Pictures: attention heatmaps, the interactive attention viewer, training curves, the
positional encoding. Every function returns a matplotlib figure (or the page's HTML), so
that notebooks show it and scripts save it (:func:`save_figure`, atomically)."""

from .capture import capture_attention
from .curves import read_metrics, training_curves
from .figure import save_figure
from .heatmap import attention_grid, attention_heatmap
from .maps import KINDS, AttentionMaps
from .positional import positional_encoding_figure
from .viewer import attention_page

__all__ = [
    "KINDS",
    "AttentionMaps",
    "attention_grid",
    "attention_heatmap",
    "attention_page",
    "capture_attention",
    "positional_encoding_figure",
    "read_metrics",
    "save_figure",
    "training_curves",
]
