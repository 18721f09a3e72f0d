"""The task endpoints: one for each prediction of
:data:`~scratchformer.predictions.PREDICTIONS` that is not a language model's, answering
with the JSON of the records whose lines the command prints.

An endpoint's work is a function of the model and a list of items, an item being one
input with the options of its request (``(options, input)``), so that the batching worker
can run the inputs of many requests in one call: items that share options run together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..predictions import PREDICTIONS, Prediction
from ..tasks.base import Task
from . import schema

Item = tuple[tuple[tuple[str, Any], ...], Any]
"""One input and the options of its request, as ``(name, value)`` pairs (hashable)."""
Output = dict[str, Any]


@dataclass(frozen=True)
class Endpoint:
    """The endpoint of a prediction: its path, its body, and the items of a body."""

    path: str
    prediction: Prediction
    body: type[schema.Body]

    @classmethod
    def of(cls, prediction: Prediction | None) -> Endpoint | None:
        """The endpoint of ``prediction``, if it has one of its own."""
        if prediction is None or prediction.endpoint is None:
            return None
        return cls(prediction.endpoint, prediction, schema.task_body(prediction))

    def items(self, body: Any) -> list[Item]:
        """The inputs of a body (a text, or the tuple of the fields' texts), each with the
        body's options."""
        served = [option.name for option in self.prediction.options if option.served]
        options = tuple((name, getattr(body, name)) for name in served)
        inputs = body.input if isinstance(body.input, list) else [body.input]
        fields = self.prediction.reads.fields
        if fields:
            inputs = [tuple(getattr(given, field) for field in fields) for given in inputs]
        return [(options, given) for given in inputs]


def endpoints() -> list[Endpoint]:
    """The endpoint of every prediction that has one."""
    return [e for prediction in PREDICTIONS.values() if (e := Endpoint.of(prediction))]


def predicted(task: Task, model: nn.Module, items: list[Item]) -> list[Output]:
    """The JSON of the record of each item's input, ``task.predict`` called once for each
    set of options among them."""

    def run(options: tuple[tuple[str, Any], ...], inputs: list[Any]) -> list[Output]:
        return [record.json() for record in task.predict(model, inputs, **dict(options))]

    return grouped(run, items)


def grouped(
    run: Callable[[tuple[Any, ...], list[Any]], list[Output]], items: Sequence[Item]
) -> list[Output]:
    """``run(options, inputs)`` once for each set of options among ``items``; the outputs
    in the items' order."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, (options, _) in enumerate(items):
        groups.setdefault(options, []).append(i)
    outputs: list[Output] = [{} for _ in items]
    for options, indices in groups.items():
        for i, result in zip(indices, run(options, [items[i][1] for i in indices]), strict=True):
            outputs[i] = result
    return outputs
