"""``scratchformer import-hf``, ``scratchformer export-hf`` and ``scratchformer export-peft``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..run import export_hf, export_peft, import_hf


def import_checkpoint(args: argparse.Namespace) -> int:
    """``scratchformer import-hf HF_DIR --out DIR [--set data.KEY=VALUE]``: a run directory
    from a checkpoint."""
    recipe = import_hf(Path(args.hf_dir), Path(args.out), args.set)
    print(f"imported {args.hf_dir} into {args.out} (task={recipe.task}, arch={recipe.model.arch})")
    return 0


def export_checkpoint(args: argparse.Namespace) -> int:
    """``scratchformer export-hf DIR --out HF_DIR``: a Hugging Face checkpoint of a run."""
    export_hf(Path(args.run), Path(args.out))
    print(f"{args.out}: a Hugging Face checkpoint of {args.run}")
    return 0


def export_adapter(args: argparse.Namespace) -> int:
    """``scratchformer export-peft RUN --out DIR``: a LoRA run's adapters for PEFT."""
    export_peft(Path(args.run), Path(args.out))
    print(f"{args.out}: the PEFT adapters of {args.run}")
    return 0
