"""What several commands share: opening the run they name, its precision, reading standard
input."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

from torch import nn

from ..device import bf16_autocast, default_device, uses_bf16
from ..errors import UsageError
from ..predictions import Prediction
from ..run import load_run
from ..tasks import TASKS, Task


def run_of(args: argparse.Namespace, prediction: Prediction) -> tuple[Task, nn.Module]:
    """The task and model of ``args.run`` (quantized as ``args.quantize`` says), on
    ``args.device``; the run must be of a task that makes ``prediction``. With ``--onnx
    DIR`` the model is the one exported there, run by ONNX Runtime."""
    onnx = getattr(args, "onnx", None)
    if onnx is not None and args.quantize is not None:
        raise UsageError("--onnx runs the exported float32 graph: leave out --quantize")
    if onnx is not None and args.compile == "always":
        raise UsageError("--onnx runs the graph in ONNX Runtime: leave out --compile")
    task, model = load_run(Path(args.run), quantization=args.quantize)
    if task.predicts is not prediction:
        wanted = " or ".join(name for name, kind in TASKS.items() if kind.predicts is prediction)
        command = prediction.command
        raise UsageError(f"{args.run} is a {task.name!r} run; {command} needs a {wanted} run")
    if onnx is not None:
        from ..interop.onnx import OnnxRuntimeModel  # (ONNX Runtime: imported when asked for)

        return task, OnnxRuntimeModel.of_run(Path(onnx), task)
    return task, model.to(default_device(args.device))


def in_precision(
    command: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """``command`` run under its ``--precision``: in bfloat16 autocast where that asks for
    it, else in float32."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        device = default_device(args.device)
        with bf16_autocast(device, uses_bf16(args.precision, device)):
            return command(args)

    return run


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
