"""Whether a server compiles its model, and compiling it before the first request.

``scratchformer serve`` takes ``--compile`` (always), ``--no-compile`` (never) and by
default compiles when the last server of the same run and settings on this machine did
work enough to repay a compilation (:mod:`~scratchformer.inference.compile_choice`). No
request says ahead how much a server will do, so the last one's life stands for it: each
server records at its end the seconds its model computed and the units it did (tokens
decoded, inputs run), and the compilation it paid at its start.

A compiled server compiles before it answers, so that no request waits on a compilation.
A language model's decoding step compiles in
:meth:`~scratchformer.inference.ContinuousBatcher.warm_up` (its rows and cache length are
dynamic). Any other run's model compiles through its endpoint, called on :data:`WARM_UP`'s
texts, a call each: one input, then one of another length, after which Dynamo holds the
length dynamic, then several, after which it holds the batch dynamic too. Sizes of 1 keep
graphs of their own (Dynamo specializes them), and a translation run's greedy search
(``beam_size=1``, an :attr:`~.tasks.Endpoint.variants`) calls the decoder with a row a
text, so it is warmed up too: a classifier's forward compiles three graphs, a translation
run's encoder and decoder ten (its first and later steps, beam and greedy), and no later
call of any size or length compiles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from ..inference.compile_choice import Choice, choose, job_key, last_units
from ..tasks.base import Task
from .tasks import Endpoint

WARM_UP = (("an example",), ("a longer example of a text to read",), ("another one", "a third"))
"""The texts of the warm-up calls, a call each."""


def server_choice(setting: str, model: nn.Module, task: Task, **settings: Any) -> Choice:
    """Compile or not (``setting``: "auto", "always" or "never") a server of ``model`` for
    ``task`` with these ``settings``, for as much work as the last such server did here."""
    key = job_key(model, "serve", task=task.command, **settings)
    return choose(setting, key, last_units(key))


def warm_up(
    task: Task,
    endpoint: Endpoint | None,
    predict: Callable[[list[Any]], Any] | None,
    embed: Callable[[list[str]], Any] | None,
) -> None:
    """Call the endpoint's work (``predict``, on items of ``endpoint``'s bodies, one of each
    of its variants) and ``embed`` on :data:`WARM_UP`'s texts, so that a compiled model
    compiles now."""
    for texts in WARM_UP:
        if endpoint is not None and predict is not None:
            inputs = [endpoint.example(task, text) for text in texts]
            for fields in endpoint.variants:
                predict(endpoint.items(endpoint.body(input=inputs, **fields)))
        if embed is not None:
            embed(list(texts))
