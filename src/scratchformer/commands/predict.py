"""The commands that use a trained model: ``eval``, ``generate``, and the command of each
prediction that reads standard input a line at a time (``translate``, ``classify``,
``tag``, ``answer``, ``fill-mask``, ``fill-spans``: :mod:`scratchformer.predictions`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from torch import nn

from ..data.tokenizer import Tokenizer
from ..device import default_device
from ..errors import LineError, UsageError, naming_the_source
from ..inference.compile_choice import Choice, choose, job_key, measured, say
from ..inference.engine import Engine, Request, exported_step
from ..inference.sampling import Sampling, TokenLogprob
from ..predictions import PREDICTIONS
from ..run import load_run, run_model
from ..training.rundir import CONFIG_FILE
from .common import in_precision, input_lines, progress_wanted, run_of


@in_precision
def evaluate(args: argparse.Namespace) -> int:
    """``scratchformer eval DIR [--split val|test | --data FILE]``: JSON metrics, with the
    scores of real decoding (not teacher forcing) for the tasks that decode."""
    task, model = load_run(Path(args.run), quantization=args.quantize)
    device = default_device(args.device)
    if task.keeps_starting_model:
        task.prepare_model(run_model(task.recipe, pretrained_weights=True).to(device))
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


def compile_choice(
    args: argparse.Namespace, model: nn.Module, units: float, **settings: Any
) -> Choice:
    """Whether a job of ``units`` units compiles its model: if ``--compile`` says so or, by
    default, if the job repays it on this machine
    (:mod:`~scratchformer.inference.compile_choice`); said on stderr."""
    choice = choose(args.compile, job_key(model, args.command, **settings), units)
    say(choice, args.verbose)
    if choice.compile and not args.quiet:
        print(
            "compiling the model: a minute or more the first time on this machine, "
            "seconds once cached",
            file=sys.stderr,
        )
    return choice


@contextmanager
def compiled_as_chosen(
    args: argparse.Namespace, model: nn.Module, units: float, **settings: Any
) -> Iterator[nn.Module]:
    """The model for a job of ``units`` units, compiled through ``torch.compile`` as
    :func:`compile_choice` chooses, so that the next process finds the code (int8 weights
    compile frozen: their fused kernels need the weights as constants); the job's time is
    recorded."""
    choice = compile_choice(args, model, units, **settings)
    if choice.compile:
        from ..inference import CompiledModel  # (torch's compiler: imported when asked for)

        model = CompiledModel(model, cached=args.quantize is None)
    with measured(choice, None, args.verbose, None):
        yield model


@in_precision
def generate(args: argparse.Namespace) -> int:
    """``scratchformer generate DIR --prompt TEXT``: stream a continuation to stdout (the
    decoding engine with one request), then, with ``--logprobs N``, a line for each new
    token: its text, log-probability, and the N likeliest tokens at its place."""
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
    sys.stdout.write(args.prompt)
    if args.max_new_tokens == 0:
        sys.stdout.write("\n")
        return 0
    sampling = Sampling(
        args.temperature,
        args.top_k,
        args.top_p,
        args.repetition_penalty,
        args.no_repeat_ngram,
        args.greedy,
    )
    request = Request(
        prompt,
        args.max_new_tokens,
        sampling,
        seed=args.seed,
        eos_id=tokenizer.eos_id,
        stop=(lambda ids: any(s in tokenizer.decode(ids) for s in stops)) if stops else None,
        logprobs=args.logprobs,
    )
    needed = len(prompt) + args.max_new_tokens
    choice = compile_choice(args, model, args.max_new_tokens, exported=exported_step(model, needed))
    # compiled, a row holds the model's whole context: one compiled step serves every prompt
    row = max(needed, model.config.max_len) if choice.compile else needed
    try:
        engine = Engine(model, 1, row, compiled=choice.compile)
        engine.add(request)
    except ValueError as error:
        raise UsageError(f"--max-new-tokens: {error}") from None
    compilation = getattr(engine.stepper, "compilation", None)
    shown = ""
    with measured(choice, lambda: len(request.tokens), args.verbose, compilation):
        while not engine.idle:
            engine.step()
            text = tokenizer.decode(request.tokens)
            if not text.endswith("\ufffd"):  # print once a multi-byte character is whole
                sys.stdout.write(text[len(shown) :])
                sys.stdout.flush()
                shown = text
    sys.stdout.write(tokenizer.decode(request.tokens)[len(shown) :] + "\n")
    if args.logprobs is not None:
        sys.stdout.writelines(logprob_line(tokenizer, each) for each in request.token_logprobs)
    return 0


def logprob_line(tokenizer: Tokenizer, scored: TokenLogprob) -> str:
    """One token's line of ``generate --logprobs``: its text, its log-probability, then the
    likeliest tokens at its place with theirs, tab-separated."""
    top = "".join(f"\t{tokenizer.decode([t])!r} {value:.4f}" for t, value in scored.top)
    return f"{tokenizer.decode([scored.token])!r}\t{scored.logprob:.4f}{top}\n"


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
