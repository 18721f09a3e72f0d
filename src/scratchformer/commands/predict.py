"""The commands that use a trained model: ``eval``, ``generate``, and the command of each
prediction that reads standard input a line at a time (``translate``, ``classify``,
``tag``, ``answer``, ``fill-mask``, ``fill-spans``: :mod:`scratchformer.predictions`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..device import default_device, model_device
from ..errors import LineError, UsageError, naming_the_source
from ..inference.cache import SPARE
from ..inference.compile_choice import choose, job_key, measured, say
from ..inference.generate import stream
from ..predictions import PREDICTIONS
from ..run import load_run
from ..training.rundir import CONFIG_FILE
from .common import in_precision, input_lines, progress_wanted, run_of


@in_precision
def evaluate(args: argparse.Namespace) -> int:
    """``scratchformer eval DIR [--split val|test | --data FILE]``: JSON metrics, with the
    scores of real decoding (not teacher forcing) for the tasks that decode."""
    task, model = load_run(Path(args.run), quantization=args.quantize)
    device = default_device(args.device)
    with naming_the_source(Path(args.run) / CONFIG_FILE):
        metrics = task.evaluate(model.to(device), args.split, args.data, device=device)
        metrics.update(
            task.decoding_metrics(
                model, args.split, args.data, args.beam_size, progress_wanted(args)
            )
        )
    split = args.split if args.data is None else args.data
    print(json.dumps({"split": split, **metrics}, indent=2))
    return 0


@contextmanager
def compiled_as_chosen(
    args: argparse.Namespace,
    model: nn.Module,
    units: float,
    done: Callable[[], float] | None = None,
    cache_positions: int | None = None,
    **settings: Any,
) -> Iterator[nn.Module]:
    """The model for a job of ``units`` units: compiled if ``--compile`` says so or, by
    default, if the job repays it on this machine
    (:mod:`~scratchformer.inference.compile_choice`); the job's time is recorded, with
    the units ``done`` counts if given. ``cache_positions``: the KV cache a generation
    needs (see :func:`compiled`)."""
    ahead = cache_positions is not None and exportable(model, cache_positions)
    if ahead:
        settings["ahead_of_time"] = True  # (compiled otherwise, so measured apart)
    choice = choose(args.compile, job_key(model, args.command, **settings), units)
    say(choice, args.verbose)
    if choice.compile:
        if not args.quiet:
            print(
                "compiling the model: a minute or more the first time on this machine, "
                "seconds once cached",
                file=sys.stderr,
            )
        model = compiled(model, ahead, cached=args.quantize is None)
    with measured(choice, done, args.verbose, getattr(model, "compilation", None)):
        yield model


def exportable(model: nn.Module, cache_positions: int) -> bool:
    """Whether a generation of ``model`` (a language model's run) that needs
    ``cache_positions`` positions of KV cache takes
    :class:`~scratchformer.inference.exported.ExportedLM`: on the CPU (where it was
    measured), if the model's context holds them."""
    return model_device(model).type == "cpu" and cache_positions <= model.config.max_len + SPARE


def compiled(model: nn.Module, ahead: bool, cached: bool) -> nn.Module:
    """``model`` compiled: a one-row decoding step compiled ahead of time, for the whole of
    the model's context (one package kept per model and precision), if ``ahead``; else
    through ``torch.compile``, so that the next process finds the code if ``cached``
    (int8 weights compile frozen: their fused kernels need the weights as constants)."""
    if ahead:
        from ..inference.exported import ExportedLM  # (torch's compiler: imported when asked for)

        bf16 = torch.is_autocast_enabled("cpu")
        return ExportedLM(model, rows=1, context=model.config.max_len + SPARE, bf16=bf16)
    from ..inference import CompiledModel

    return CompiledModel(model, cached=cached)


@in_precision
def generate(args: argparse.Namespace) -> int:
    """``scratchformer generate DIR --prompt TEXT``: stream a continuation to stdout."""
    task, model = run_of(args, PREDICTIONS[args.command])
    tokenizer = task.tokenizer()
    try:
        prompt = tokenizer.encode(args.prompt)
    except ValueError as error:
        raise UsageError(f"--prompt: {error}") from None
    if not prompt:
        raise UsageError(f"--prompt {args.prompt!r} is no tokens: give it some text")
    stops = list(args.stop)
    if "" in stops:
        raise UsageError("--stop '' would stop before the first token: give it some text")
    new: list[int] = []
    shown = ""
    units = args.max_new_tokens
    positions = len(prompt) + args.max_new_tokens + SPARE
    with compiled_as_chosen(args, model, units, lambda: len(new), positions) as model:
        sys.stdout.write(args.prompt)
        for step in stream(
            model,
            [prompt],
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            repetition_penalty=args.repetition_penalty,
            no_repeat_ngram_size=args.no_repeat_ngram,
            greedy=args.greedy,
            eos_id=tokenizer.eos_id,
            stop=(lambda ids: any(s in tokenizer.decode(ids) for s in stops)) if stops else None,
            seed=args.seed,
        ):
            if step[0] is None:
                break
            new.append(step[0])
            text = tokenizer.decode(new)
            if not text.endswith("\ufffd"):  # print once a multi-byte character is whole
                sys.stdout.write(text[len(shown) :])
                sys.stdout.flush()
                shown = text
    sys.stdout.write(tokenizer.decode(new)[len(shown) :] + "\n")
    return 0


@in_precision
def predict(args: argparse.Namespace) -> int:
    """``scratchformer COMMAND RUN < inputs``: the output of the run's prediction for each
    line of standard input, as its task prints it; a line it refuses is named as standard
    input's. The model runs compiled as chosen for a job of that many characters (its
    speed depending on the options too), unless ONNX Runtime runs it."""
    prediction = PREDICTIONS[args.command]
    task, model = run_of(args, prediction)
    options = {option.name: getattr(args, option.name) for option in prediction.options}
    lines = input_lines()
    units = sum(map(len, lines))
    onnx = getattr(args, "onnx", None) is not None
    with nullcontext(model) if onnx else compiled_as_chosen(args, model, units, **options) as run:
        try:
            outputs = task.predict_lines(run, lines, progress=progress_wanted(args), **options)
        except LineError as error:
            raise ValueError(f"standard input, {error}") from None
    sys.stdout.writelines(output + "\n" for output in outputs)
    return 0
