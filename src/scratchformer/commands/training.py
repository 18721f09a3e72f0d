"""``scratchformer train``, and the runs made of a trained one: ``scratchformer merge`` and
``scratchformer quantize``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .. import run
from ..errors import naming_the_source


def train(args: argparse.Namespace) -> int:
    """``scratchformer train RECIPE --out DIR [--set k=v ...] [--resume | --overwrite]``."""
    with naming_the_source(args.recipe):
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


def merge(args: argparse.Namespace) -> int:
    """``scratchformer merge RUN --out DIR``: a run of a LoRA run's merged weights."""
    run.merge(Path(args.run), Path(args.out))
    print(f"{args.out}: the model of {args.run} with its LoRA adapters merged")
    return 0


def quantize(args: argparse.Namespace) -> int:
    """``scratchformer quantize RUN --out DIR [--quantize int8]``: a run of quantized weights."""
    run.quantize_run(Path(args.run), Path(args.out), args.quantize)
    print(f"{args.out}: the model of {args.run} with {args.quantize} weights")
    return 0
