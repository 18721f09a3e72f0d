"""``scratchformer train``."""

from __future__ import annotations

import argparse
import json

from .. import run


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
