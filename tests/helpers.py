"""Small helpers shared by tests."""

from __future__ import annotations

from collections.abc import Iterable


def set_options(settings: Iterable[str]) -> list[str]:
    """``["a.b=1", "c.d=2"]`` -> ``["--set", "a.b=1", "--set", "c.d=2"]``."""
    return [part for setting in settings for part in ("--set", setting)]
