"""A figure saved as a picture file whole or not at all, so that an interrupted or failed
save never leaves a truncated picture where a good one was."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from ..io import atomic_write_figure

DPI = 100
"""Pixels per inch of the raster pictures (PNG)."""


def save_figure(figure: Figure, path: str | Path) -> None:
    """Write ``figure`` to ``path`` atomically, in the format its suffix names (``.png``,
    ``.svg``, ``.pdf``, ...); an unknown suffix is a ``ValueError`` naming the file."""
    path = Path(path)
    picture_format = path.suffix.lower().lstrip(".")
    supported = figure.canvas.get_supported_filetypes()
    if picture_format not in supported:
        raise ValueError(f"{path}: a picture's name must end in .{', .'.join(sorted(supported))}")
    atomic_write_figure(path, figure, format=picture_format, dpi=DPI)
