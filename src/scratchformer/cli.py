"""The ``scratchformer`` command.

User errors (bad arguments, missing or malformed files, bad recipe keys or values) are
reported as one line on stderr with exit status 2 and no traceback; ``--debug`` shows it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from . import __version__
from .config import Recipe
from .models import build_model
from .tasks import Task, build_task
from .training.checkpoint import TRAINER_STATE, atomic_write_text, load_weights
from .training.distributed import Distributed, default_device, setup
from .training.trainer import Trainer, TrainingError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


class UsageError(ValueError):
    """A mistake in how the command was called."""


def train(args: argparse.Namespace) -> int:
    """``scratchformer train RECIPE --out DIR [--set k=v ...] [--resume]``."""
    run_dir = Path(args.out)
    started = (run_dir / TRAINER_STATE).exists()
    if args.resume and not started:
        raise UsageError(f"{run_dir} holds no checkpoint to resume; train without --resume")
    if not args.resume and started:
        raise UsageError(f"{run_dir} already holds a run: add --resume, or choose another --out")
    dist = setup()
    try:
        task, recipe = _prepare_run(args, run_dir, dist)
        if recipe.train.threads is not None:
            torch.set_num_threads(recipe.train.threads)
        torch.manual_seed(recipe.train.seed)
        model = build_model(recipe.model)
        result = Trainer(task, model, run_dir, dist, quiet=args.quiet).fit(resume=args.resume)
    finally:
        dist.close()
    if dist.is_main:
        print(json.dumps(result, indent=2))
    return 0


def _prepare_run(args: argparse.Namespace, run_dir: Path, dist: Distributed) -> tuple[Task, Recipe]:
    """The task with its tokenizers, and the completed recipe: learnt from the training data
    by rank 0 and written to ``run_dir``, or read back from it (resume, other ranks)."""
    if not args.resume and dist.is_main:
        recipe = Recipe.load(args.recipe, args.set)
        task = build_task(recipe)
        task.prepare()
        recipe.model = task.model_config()
        run_dir.mkdir(parents=True, exist_ok=True)
        task.save(run_dir)
        atomic_write_text(run_dir / CONFIG_FILE, recipe.to_json())
    dist.barrier()
    if args.resume or not dist.is_main:
        overrides = list(args.set) if args.resume else []
        recipe = Recipe.load(run_dir / CONFIG_FILE, overrides)
        task = build_task(recipe)
        task.load(run_dir)
    return task, recipe


def load_run(run_dir: Path) -> tuple[Task, torch.nn.Module]:
    """The task (with its tokenizers) and the best trained model of a run directory."""
    if not (run_dir / WEIGHTS_FILE).exists():
        raise UsageError(f"{run_dir} holds no trained model ({WEIGHTS_FILE}); train it first")
    recipe = Recipe.load(run_dir / CONFIG_FILE)
    task = build_task(recipe)
    task.load(run_dir)
    model = build_model(recipe.model)
    load_weights(run_dir / WEIGHTS_FILE, model)
    return task, model.eval()


def evaluate(args: argparse.Namespace) -> int:
    """``scratchformer eval DIR [--split val|test | --data FILE]``: JSON metrics."""
    task, model = load_run(Path(args.run))
    device = default_device()
    metrics = task.evaluate(model.to(device), args.split, args.data, device=device)
    print(
        json.dumps({"split": args.split if args.data is None else args.data, **metrics}, indent=2)
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scratchformer",
        description="Train, run and look inside Transformers written from scratch.",
    )
    parser.add_argument("--version", action="version", version=f"scratchformer {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or log lines")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = commands.add_parser("train", help="train a model from a TOML recipe")
    p.add_argument("recipe", help="recipe file (TOML), e.g. recipes/shakespeare-char.toml")
    p.add_argument("--out", required=True, help="run directory to write, e.g. runs/NAME")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a recipe setting (repeatable), e.g. train.max_steps=200",
    )
    p.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its last checkpoint"
    )
    p.set_defaults(handler=train)

    p = commands.add_parser("eval", help="print a trained model's metrics as JSON")
    p.add_argument("run", help="run directory")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--split", default="val", help="val (default) or test")
    group.add_argument("--data", help="a file in the task's format (translation: SRC,TGT)")
    p.set_defaults(handler=evaluate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 0
    try:
        return int(args.handler(args) or 0)
    except (ValueError, OSError) as error:
        if args.debug:
            raise
        print(f"scratchformer: error: {error}", file=sys.stderr)
        return 2
    except TrainingError as error:
        if args.debug:
            raise
        print(f"scratchformer: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("scratchformer: interrupted; the last checkpoint is kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
