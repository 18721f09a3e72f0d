"""What the trained models of each task predict, declared once: the command that runs
them, what one input is, and their options with defaults, types, bounds and help. The
command line's subcommands, :meth:`Task.predict <scratchformer.tasks.Task.predict>` (the
Python API), the server's endpoints and their bodies and the page's form are all made
from these declarations; a task names its own (``predicts = TRANSLATE``) and turns each
input into a record (:class:`Record`), whose fields are the server's JSON and whose
:meth:`Record.line` is what the command line prints.

This module imports neither torch nor the rest of the package, so that the command line
parses without torch. A new prediction is a :class:`Prediction` in :data:`PREDICTIONS`
and a task whose ``records`` make it (see docs/design.md, "Where new parts go").
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """An option of a prediction: a keyword of ``Task.predict``, a field of the endpoint's
    body, and ``--name-with-dashes`` (or ``flag``) on the command line."""

    name: str
    type: type[int] | type[float] | type[str] | type[bool]
    """``bool``: a flag given or not; ``str`` with ``repeated``: texts."""
    default: Any
    help: str
    low: float | None = None
    """The least value, if bounded below (``above``: the value must exceed it)."""
    above: bool = False
    high: float | None = None
    """The greatest value, if bounded above."""
    limit: float | None = None
    """The greatest value a request to the server may ask, where nothing else bounds it:
    the server's work is shared by its clients."""
    flag: str | None = None
    """The command line's flag, where it is not ``--name-with-dashes``."""
    metavar: str | None = None
    repeated: bool = False
    """A list of values, the flag given once for each (``default``: an empty tuple)."""
    served: bool = True
    """A field of the endpoint's body (a batch size is the server's own to choose)."""

    @property
    def most(self) -> float | None:
        """The greatest value a request to the server may ask."""
        return self.high if self.limit is None else self.limit


@dataclass(frozen=True)
class Input:
    """What one input of a prediction is: a text, or texts in named ``fields`` (on a line
    separated by tabs, the last field taking the rest of the line; in an HTTP body, an
    object of them)."""

    fields: tuple[str, ...] = ()

    def read(self, line: str) -> Any:
        """The input that a line of text gives: the line, or the texts of the fields
        (:meth:`split`; an empty line asks nothing of fields: None)."""
        if not self.fields:
            return line
        return self.split(line) if line else None

    def split(self, line: str) -> tuple[str, ...]:
        """The texts of the fields on a line, separated by tabs."""
        texts = line.split("\t", len(self.fields) - 1)
        if len(texts) < len(self.fields):
            raise ValueError(f"expected '{'<TAB>'.join(self.fields)}', got {line[:60]!r}")
        return tuple(texts)


TEXT = Input()


@dataclass(frozen=True)
class Prediction:
    """What the models of a task predict: the command (``scratchformer COMMAND RUN``) and
    the endpoint (``POST /v1/COMMAND``) that ask for it, what it reads and its options."""

    command: str
    help: str
    """The command's line in ``scratchformer --help``."""
    model: str
    """What run the command takes, e.g. ``a translation model``."""
    hint: str
    """What the page's text box takes, a line each."""
    description: str | None = None
    """The command's ``--help`` beyond its options."""
    reads: Input = TEXT
    options: tuple[Option, ...] = ()
    decodes: bool = False
    """A language model's: it continues a prompt (``--prompt``) as the tokens come, and
    is served by OpenAI's completions rather than an endpoint of its own."""
    onnx: bool = False
    """Whether ``--onnx DIR`` may run the graph that ``export-onnx`` wrote instead."""
    decoder_reads: str | None = None
    """The field of an output that the attention viewer shows the decoder reading (an
    encoder-decoder's output: a translation's ``translation``)."""
    variants: tuple[dict[str, Any], ...] = ({},)
    """Option values under which the model is called otherwise (translation's
    ``beam_size=1`` decodes greedily, a row a text): a compiled server warms up under
    each."""

    @property
    def endpoint(self) -> str | None:
        """The server's path for it, if it has one of its own."""
        return None if self.decodes else f"/v1/{self.command}"

    def settings(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every option's value: ``given``'s, else its default. An option the prediction
        does not have is an error naming it."""
        names = [option.name for option in self.options]
        unknown = sorted(set(given) - set(names))
        if unknown:
            have = ", ".join(names) or "none"
            raise ValueError(f"{self.command} has no option {unknown[0]!r} (its options: {have})")
        return {option.name: given.get(option.name, option.default) for option in self.options}


class Record(ABC):
    """One output of a prediction, a dataclass: its fields are the server's JSON of it,
    and :meth:`line` is what the command line prints."""

    @abstractmethod
    def line(self) -> str:
        """The output as the command line prints it, without the line end."""

    def json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


MAX_NEW_TOKENS = Option("max_new_tokens", int, 200, "tokens to add at most", low=0)
TEMPERATURE = Option("temperature", float, 0.8, "0: greedy", low=0, limit=2)
GENERATE = Prediction(
    "generate",
    "continue a prompt with a language model",
    "a language model",
    "A prompt; the continuation streams below.",
    options=(
        MAX_NEW_TOKENS,
        TEMPERATURE,
        Option("top_k", int, None, "sample among the k likeliest tokens", low=1),
        Option(
            "top_p",
            float,
            None,
            "sample among the likeliest tokens whose probabilities add up to p",
            low=0,
            above=True,
            high=1,
        ),
        Option(
            "repetition_penalty",
            float,
            1.0,
            "above 1, tokens already in the text become less likely (CTRL's penalty)",
            low=0,
            above=True,
        ),
        Option(
            "no_repeat_ngram",
            int,
            0,
            "never repeat an n-gram of N tokens (0: off)",
            low=0,
            metavar="N",
        ),
        Option("greedy", bool, False, "always take the most likely token"),
        Option(
            "stop",
            str,
            (),
            "stop once the output contains TEXT (repeatable)",
            metavar="TEXT",
            repeated=True,
        ),
        Option("seed", int, None, "for reproducible sampling"),
        Option(
            "logprobs",
            int,
            None,
            "after the text, each new token's log-probability and the N likeliest at its "
            "place (0 to 5)",
            low=0,
            high=5,
            metavar="N",
        ),
    ),
    decodes=True,
)

BEAM_SIZE = Option("beam_size", int, 5, "beam size (1: greedy)", low=1, limit=16, flag="--beam")
LENGTH_PENALTY = Option(
    "length_penalty",
    float,
    0.6,
    "GNMT's alpha: higher favours longer translations (0: none)",
    low=0,
    high=10,  # (GNMT's alpha is about 0.6; a huge one overflows the penalty)
)
BATCH_SIZE = Option("batch_size", int, 64, "sentences decoded together", low=1, served=False)
TRANSLATE = Prediction(
    "translate",
    "translate stdin to stdout, line by line",
    "a translation model",
    "A sentence a line.",
    "One line out per line in, in order; an empty line gives an empty line. A line longer "
    "than the model's data.max_len tokens is truncated to it, with a warning on stderr; "
    "unknown characters become the unknown token.",
    options=(BEAM_SIZE, LENGTH_PENALTY, BATCH_SIZE),
    decoder_reads="translation",
    variants=({}, {BEAM_SIZE.name: 1}),
)

CLASSIFY = Prediction(
    "classify",
    "label each line of stdin",
    "a classification or regression model",
    "A sentence a line (two, tab-separated, for pair tasks).",
    "One line out per line in: label<TAB>probability, or the value of a regression model. "
    "Sentence pairs are given as first<TAB>second. Inputs longer than the model's "
    "data.max_len tokens are truncated.",
    onnx=True,
)

TAG = Prediction(
    "tag",
    "tag the words of each line of stdin",
    "a tagging model",
    "A sentence a line; words are split on whitespace.",
    "Words are split on whitespace; each comes out as 'word tag', with a blank line after "
    "each sentence (an empty line gives just the blank line). Words beyond the model's "
    "data.max_len sub-words are tagged O, with a warning on stderr.",
    onnx=True,
)

ANSWER = Prediction(
    "answer",
    "answer each question<TAB>context line of stdin",
    "a question-answering model",
    "question<TAB>context, a line each.",
    "One line out per line in: answer<TAB>probability, the answer an exact substring of "
    "the context (an empty line gives an empty line). A context longer than the model's "
    "data.max_len tokens is read through overlapping windows (data.qa.doc_stride); the best "
    "span of at most data.qa.max_answer_len tokens wins.",
    reads=Input(("question", "context")),
    onnx=True,
)

TOP_K = Option("top_k", int, 5, "fillers shown for each mask", low=1, limit=100)
FILL_MASK = Prediction(
    "fill-mask",
    "fill the [MASK] tokens of each line of stdin",
    "a masked language model (task mlm)",
    "A text with [MASK] a line.",
    "One line out per line in: for each [MASK] of the line, its likeliest tokens as "
    "'token probability' separated by tabs, the masks separated by ' | '. A line without "
    "[MASK] is an error.",
    options=(TOP_K,),
)

FILL_SPANS = Prediction(
    "fill-spans",
    "fill the sentinels <extra_id_N> of each line of stdin",
    "a span-corruption model (task span_corruption)",
    "A text with <extra_id_0>, <extra_id_1>, ... a line.",
    "One line out per line in: the spans the model writes greedily for the line's "
    "sentinels (<extra_id_0>, <extra_id_1>, ...), in the line's order, separated by tabs. "
    "The text around a sentinel is encoded as written. A line without a sentinel is an "
    "error.",
)

PREDICTIONS: dict[str, Prediction] = {
    prediction.command: prediction
    for prediction in (GENERATE, TRANSLATE, CLASSIFY, TAG, ANSWER, FILL_MASK, FILL_SPANS)
}
"""Every prediction, by command."""
