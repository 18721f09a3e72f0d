"""Pictures: attention heatmaps."""

from .heatmap import attention_heatmap

__all__ = ["attention_heatmap"]
