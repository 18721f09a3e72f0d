"""What a server runs, made ready before its first request: compiled or not, and warmed up.

``scratchformer serve`` takes ``--compile`` (always), ``--no-compile`` (never) and by
default compiles when the last server of the same run and settings on this machine did
work enough to repay a compilation (:mod:`~scratchformer.inference.compile_choice`). No
request says ahead how much a server will do, so the last one's life stands for it: each
server records at its end the seconds its model computed and the units it did (tokens
decoded, inputs run), and the compilation it paid at its start (:meth:`Serving.record`).

A compiled server compiles before it answers, so that no request waits on a compilation.
A language model's decoding step compiles when its
:class:`~scratchformer.inference.Engine` is made (ahead of time, on the CPU) or
in its warm-up (its rows and cache length are dynamic). Any other run's model compiles
through its endpoint, called on :data:`WARM_UP`'s texts, a call each: one input, then one
of another length, after which Dynamo holds the length dynamic, then several, after which
it holds the batch dynamic too. Sizes of 1 keep
graphs of their own (Dynamo specializes them), and a translation run's greedy search
(``beam_size=1``, one of its prediction's
:attr:`~scratchformer.predictions.Prediction.variants`) calls the decoder with a row a
text, so it is warmed up too: a classifier's forward compiles three graphs, a translation
run's encoder and decoder ten (its first and later steps, beam and greedy), and no later
call of any size or length compiles.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

from ..inference.compile_choice import (
    Choice,
    Compilation,
    choose,
    compilation_since,
    compile_counts,
    job_key,
    last_units,
    record,
    say,
)
from ..inference.engine import Engine
from ..inference.prefix_cache import PrefixCache
from ..tasks.base import Task
from .tasks import predicted
from .workers import Usage

WARM_UP = (("an example",), ("a longer example of a text to read",), ("another one", "a third"))
"""The texts of the warm-up calls, a call each."""

Work = Callable[[list[Any]], list[Any]]
"""A list of inputs -> their outputs."""


@dataclass(frozen=True)
class Serving:
    """What a server runs: for a language model, its decoding engine; for the other
    runs, the endpoint's work (``predict``, on its items) and the embeddings (``embed``,
    on texts), whichever the task has; all on the model or the model compiled, as
    ``choice`` says, and ``compiled`` what compiling took."""

    choice: Choice
    compiled: Compilation | None
    engine: Engine | None = None
    predict: Work | None = None
    embed: Work | None = None

    def record(self, usage: Usage) -> None:
        """Record the server's life in the ledger, for the next server's choice."""
        record(self.choice, usage.seconds, usage.units, self.compiled)


def ready(
    task: Task,
    model: nn.Module,
    computing: Callable[[], AbstractContextManager[Any]],
    setting: str,
    verbose: bool,
    max_batch: int,
    context: int | None,
    prefix_cache: int = 0,
    **settings: Any,
) -> Serving:
    """``model`` made ready to serve ``task``: compiled or not (``setting``: "auto",
    "always" or "never"; the choice told on stderr under ``verbose``) and, compiled,
    warmed up in ``computing`` (the server's precision). ``context``: a language model's
    positions a row, and the tokens of its prompts kept for the prompts that begin alike
    (``prefix_cache``, 0: none); ``settings``: what else the model's speed depends on."""
    key = job_key(model, "serve", task=task.name, max_batch=max_batch, context=context, **settings)
    choice = choose(setting, key, last_units(key))
    say(choice, verbose)
    if choice.compile and verbose:
        print("compiling the model before serving: a minute or more", file=sys.stderr)
    before = compile_counts() if choice.compile else None
    if task.decodes:
        if context is None:
            raise ValueError("a language model is served with a context: positions a row")
        with computing():  # (a compiled step is compiled for the server's precision)
            prefixes = PrefixCache(prefix_cache) if prefix_cache else None
            engine = Engine(model, max_batch, context, choice.compile, prefixes=prefixes)
            if choice.compile:
                engine.warm_up()
        ahead = getattr(engine.stepper, "compilation", None)  # (compiled ahead of time)
        return Serving(choice, compilation_since(before, verbose, ahead), engine)
    served = model
    if choice.compile:
        from ..inference import CompiledModel  # (torch's compiler: imported when asked for)

        # cached, as the command line compiles: the next server of the run finds the code in
        # Inductor's cache (int8 weights frozen, as their fused kernels need)
        served = CompiledModel(model, cached=settings.get("quantize") is None)
    prediction = task.predicts
    has_endpoint = prediction is not None and prediction.endpoint is not None
    predict = functools.partial(predicted, task, served) if has_endpoint else None
    embed = functools.partial(vectors, task, served) if hasattr(task, "embed") else None
    if choice.compile:
        with computing():
            warm_up(task, predict, embed)
    return Serving(choice, compilation_since(before, verbose), None, predict, embed)


def vectors(task: Task, model: nn.Module, texts: list[str]) -> list[np.ndarray]:
    """The embedding of each text (``task.embed``: the pooling the task's head reads)."""
    return list(task.embed(model, texts).numpy())  # type: ignore[attr-defined]


def warm_up(task: Task, predict: Work | None, embed: Work | None) -> None:
    """Call the endpoint's work (``predict``, on the inputs the task makes of
    :data:`WARM_UP`'s texts, under each of its prediction's variants) and ``embed`` on the
    texts, so that a compiled model compiles now."""
    variants = task.predicts.variants if predict is not None and task.predicts else ()
    for texts in WARM_UP:
        inputs = [task.example(text) for text in texts]
        for variant in variants:
            predict([(tuple(variant.items()), given) for given in inputs])
        if embed is not None:
            embed(list(texts))
