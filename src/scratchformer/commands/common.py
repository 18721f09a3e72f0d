"""What several commands share: opening the run they name, reading standard input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torch import nn

from ..errors import UsageError
from ..run import load_run
from ..tasks import Task
from ..training.distributed import default_device


def run_of(
    args: argparse.Namespace, kinds: tuple[type[Task], ...], command: str
) -> tuple[Task, nn.Module]:
    """The task and model of ``args.run``, which must be of one of the task ``kinds``, on
    ``args.device``."""
    task, model = load_run(Path(args.run))
    if not isinstance(task, kinds):
        wanted = " or ".join(kind.name for kind in kinds)
        raise UsageError(f"{args.run} is a {task.name!r} run; {command} needs a {wanted} run")
    return task, model.to(default_device(args.device))


def input_lines() -> list[str]:
    """Standard input's lines, without their line ends; text that is not UTF-8 is an error
    naming its line."""
    lines = []
    for number, line in enumerate(sys.stdin.buffer, start=1):
        try:
            lines.append(line.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError as error:
            raise ValueError(
                f"standard input, line {number}: not UTF-8 text ({error.reason} at byte "
                f"{error.start})"
            ) from None
    return lines


def progress_wanted(args: argparse.Namespace) -> bool:
    """A progress bar on stderr: unless ``--quiet``, and only on a terminal."""
    return not args.quiet and sys.stderr.isatty()
