"""``scratchformer train`` and ``scratchformer demo``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .. import run
from ..demo import run_demo


def train(args: argparse.Namespace) -> int:
    """``scratchformer train RECIPE --out DIR [--set k=v ...] [--resume | --overwrite]``."""
    result = run.train(
        args.recipe,
        args.out,
        overrides=args.set,
        resume=args.resume,
        overwrite=args.overwrite,
        device=args.device,
        quiet=args.quiet,
    )
    if result is not None:  # rank 0
        print(json.dumps(result, indent=2))
    return 0


def demo(args: argparse.Namespace) -> int:
    """``scratchformer demo [--out DIR] [--overwrite]``: the synthetic task end to end."""
    run_demo(Path(args.out), quiet=args.quiet, overwrite=args.overwrite)
    return 0
