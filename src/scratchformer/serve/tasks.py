"""The task endpoints: what the CLI's ``classify``, ``tag``, ``answer``, ``translate``,
``fill-mask`` and ``fill-spans`` print for each input line, as JSON objects.

Each endpoint's work is a function of the model and a list of items, an item being one
input with the options of its request (``(options, input)``), so that the batching worker
can run the inputs of many requests in one call: items that share options run together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..data.tokenizer import SENTINEL
from ..tasks.base import Task
from ..tasks.classification import ClassificationTask
from ..tasks.mlm import MASK
from . import schema

Item = tuple[tuple[Any, ...], Any]
"""One input and the options of its request (hashable)."""
Output = dict[str, Any]
Predict = Callable[[Task, nn.Module, list[Item]], list[Output]]


@dataclass(frozen=True)
class Endpoint:
    """A task endpoint: its path, its body, the items of a body, their outputs, and an
    input of a body for a text (``example(task, text)``: what a warm-up sends)."""

    path: str
    body: type[schema.Body]
    items: Callable[[Any], list[Item]]
    predict: Predict
    example: Callable[[Task, str], Any]
    variants: tuple[dict[str, Any], ...] = ({},)
    """Other fields of the bodies a warm-up sends, a set each: those that change what the
    model is called with (translation's ``beam_size=1`` decodes greedily, a row a text)."""


def line(task: Task, text: str) -> str:
    """``text`` as a line the task reads: for a task of sentence pairs, ``text<TAB>text``."""
    split_line = getattr(task, "split_line", None)  # (the sentence tasks')
    try:
        if split_line is not None:
            split_line(text)
    except ValueError:
        return f"{text}\t{text}"
    return text


def question(_: Task, text: str) -> dict[str, str]:
    return {"question": "what is it?", "context": text}


def masked(_: Task, text: str) -> str:
    return f"{text} {MASK}"


def with_sentinel(_: Task, text: str) -> str:
    return f"{text} {SENTINEL.format(0)}"


def texts(body: schema.TaskRequest) -> list[Item]:
    return [((), text) for text in body.texts()]


def classify(task: Task, model: nn.Module, items: list[Item]) -> list[Output]:
    """A label and its probability, or a value (regression, similarity), for each text."""
    lines = [text for _, text in items]
    if isinstance(task, ClassificationTask):
        return [{"label": label, "probability": p} for label, p in task.predict(model, lines)]
    return [{"value": value} for value in task.predict(model, lines)]


def tag(task: Task, model: nn.Module, items: list[Item]) -> list[Output]:
    """The words of each text (split on whitespace) and their tags."""
    sentences = [text.split() for _, text in items]
    tags = task.predict(model, sentences)
    return [{"words": w, "tags": t} for w, t in zip(sentences, tags, strict=True)]


def questions(body: schema.AnswerRequest) -> list[Item]:
    return [((), (question.question, question.context)) for question in body.questions()]


def answer(task: Task, model: nn.Module, items: list[Item]) -> list[Output]:
    """The answer to each question: a span of its context, and its probability."""
    pairs = [pair for _, pair in items]
    return [
        {
            "answer": context[slice(*prediction.span)],
            "start": prediction.span[0],
            "end": prediction.span[1],
            "probability": prediction.score,
        }
        for (_, context), prediction in zip(pairs, task.answer(model, pairs), strict=True)
    ]


def beams(body: schema.TranslateRequest) -> list[Item]:
    return [((body.beam_size, body.length_penalty), text) for text in body.texts()]


def translate(task: Task, model: nn.Module, items: list[Item]) -> list[Output]:
    """The translation of each text, by beam search."""

    def run(options: tuple[Any, ...], lines: list[str]) -> list[Output]:
        beam_size, length_penalty = options
        outputs = task.translate(model, lines, beam_size=beam_size, length_penalty=length_penalty)
        return [{"translation": line} for line in outputs]

    return grouped(run, items)


def top_k(body: schema.FillMaskRequest) -> list[Item]:
    return [((body.top_k,), text) for text in body.texts()]


def fill_mask(task: Task, model: nn.Module, items: list[Item]) -> list[Output]:
    """For each ``[MASK]`` of each text, the likeliest tokens and their probabilities."""

    def run(options: tuple[Any, ...], lines: list[str]) -> list[Output]:
        return [
            {
                "masks": [
                    [{"token": token, "probability": p} for token, p in candidates]
                    for candidates in task.fill(model, line, options[0])
                ]
            }
            for line in lines
        ]

    return grouped(run, items)


def fill_spans(task: Task, model: nn.Module, items: list[Item]) -> list[Output]:
    """The span the model writes for each sentinel of each text, in the text's order."""
    lines = task.predict_lines(model, [text for _, text in items])
    return [{"spans": line.split("\t")} for line in lines]


ENDPOINTS = {
    "classify": Endpoint("/v1/classify", schema.TaskRequest, texts, classify, line),
    "tag": Endpoint("/v1/tag", schema.TaskRequest, texts, tag, line),
    "answer": Endpoint("/v1/answer", schema.AnswerRequest, questions, answer, question),
    "translate": Endpoint(
        "/v1/translate", schema.TranslateRequest, beams, translate, line, ({}, {"beam_size": 1})
    ),
    "fill-mask": Endpoint("/v1/fill-mask", schema.FillMaskRequest, top_k, fill_mask, masked),
    "fill-spans": Endpoint("/v1/fill-spans", schema.TaskRequest, texts, fill_spans, with_sentinel),
}
"""The endpoint of each command's runs (language models have OpenAI's completions)."""


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
