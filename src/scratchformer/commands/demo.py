"""``scratchformer demo`` (it draws, so it is apart from ``train``, which need not load
matplotlib)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..demo import run_demo


def demo(args: argparse.Namespace) -> int:
    """``scratchformer demo [--out DIR] [--overwrite]``: the synthetic task end to end."""
    run_demo(Path(args.out), quiet=args.quiet, overwrite=args.overwrite)
    return 0
