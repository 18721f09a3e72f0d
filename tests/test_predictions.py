"""Each prediction is declared once: the command line's options, the Python API's, the
endpoints' bodies and the page's form are made from it. A new prediction is a task's
records and an entry in ``PREDICTIONS``: registered here in the test process, a token
counter over the suite's classifier gets its command, its endpoint and its form, and
nothing else is written for it."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest
from torch import nn

from helpers import http, live, run
from scratchformer.cli import build_parser
from scratchformer.predictions import PREDICTIONS, TEXT, Input, Option, Prediction, Record
from scratchformer.run import load_run
from scratchformer.serve.schema import task_body
from scratchformer.tasks import TASKS, ClassificationTask


@dataclass(frozen=True)
class Count(Record):
    tokens: int

    def line(self) -> str:
        return f"{self.tokens} tokens"


PER = Option("per", int, 1, "count in units of so many tokens", low=1, limit=8)
COUNT_TOKENS = Prediction(
    "count-tokens",
    "count the tokens of each line of stdin",
    "a classification model",
    "A text a line, its tokens counted.",
    "One line out per line in: how many tokens the line is.",
    options=(PER,),
)


class TokenCounting(ClassificationTask):
    """A classifier's run that counts the tokens of texts."""

    predicts = COUNT_TOKENS

    def records(
        self, model: nn.Module, inputs: list[str], *, progress: bool, per: int
    ) -> list[Count]:
        return [Count(len(self.tokenizer().encode(text)) // per) for text in inputs]


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prediction registered, and classification runs opened as token counters."""
    monkeypatch.setitem(PREDICTIONS, COUNT_TOKENS.command, COUNT_TOKENS)
    monkeypatch.setitem(TASKS._entries, "classification", TokenCounting)


def subcommand(name: str) -> Any:
    parser = build_parser()
    [commands] = [a for a in parser._actions if a.dest == "command"]
    return commands.choices[name]


def test_a_registered_prediction_has_its_command(
    counting, classification_run, capsys, monkeypatch
) -> None:
    [per] = [a for a in subcommand("count-tokens")._actions if a.dest == "per"]
    assert per.option_strings == ["--per"] and per.default == 1 and per.help == PER.help
    status, out, err = run(
        capsys, monkeypatch, "good fun\n\nbad\n", "count-tokens", str(classification_run)
    )
    tokenizer = load_run(classification_run)[0].tokenizer()
    expected = [f"{len(tokenizer.encode(text))} tokens" for text in ("good fun", "", "bad")]
    assert status == 0 and out == expected, err
    status, out, err = run(capsys, monkeypatch, "", "count-tokens", "x", "--per", "0")
    assert status == 2 and err.endswith("argument --per: 0 is not an integer >= 1\n")
    status, _, err = run(capsys, monkeypatch, "good\n", "classify", str(classification_run))
    assert status == 2 and "is a 'classification' run; classify needs" in err


def test_a_registered_prediction_has_its_python_api(counting, classification_run) -> None:
    task, model = load_run(classification_run)
    assert isinstance(task, TokenCounting)
    counts = task.predict(model, ["good fun good"], per=2)
    assert counts == [Count(len(task.tokenizer().encode("good fun good")) // 2)]
    assert task.predict(model, ["good"]) == task.predict(model, ["good"], per=1)
    with pytest.raises(ValueError, match=r"count-tokens has no option 'top_k' \(its options: per"):
        task.predict(model, ["good"], top_k=3)


def test_a_registered_prediction_has_its_endpoint_and_form(counting, classification_run) -> None:
    tokens = len(load_run(classification_run)[0].tokenizer().encode("good fun"))
    with live(classification_run) as url:
        status, answer = http(f"{url}/v1/count-tokens", {"input": ["good fun"], "per": 2})
        assert status == 200 and answer["data"] == [{"index": 0, "tokens": tokens // 2}]
        status, answer = http(f"{url}/v1/count-tokens", {"input": "good", "per": 9})
        assert status == 400 and answer["error"]["param"] == "per"
        status, answer = http(f"{url}/v1/classify", {"input": "good"})
        assert status == 404 and "/v1/classify is another task's" in answer["error"]["message"]
        page = urllib.request.urlopen(url).read().decode()
        assert COUNT_TOKENS.hint in page and '"path": "/v1/count-tokens"' in page
        assert 'id="option-per" title="count in units of so many tokens"' in page
        assert 'type="number" value="1" step="1" min="1" max="8"' in page


@pytest.mark.parametrize("prediction", list(PREDICTIONS.values()), ids=str)
def test_every_surface_takes_the_declared_defaults(prediction: Prediction) -> None:
    extra = ["--prompt", "x"] if prediction.decodes else []
    args = build_parser().parse_args([prediction.command, "RUN", *extra])
    for option in prediction.options:
        default = list(option.default) if option.repeated else option.default
        assert getattr(args, option.name) == default, option.name
    if prediction.endpoint is not None:
        body = task_body(prediction)
        served = {o.name: o.default for o in prediction.options if o.served}
        assert {k: f.default for k, f in body.model_fields.items() if k in served} == served
    assert prediction.settings({}) == {o.name: o.default for o in prediction.options}


def test_an_input_of_fields_is_a_line_of_tabs() -> None:
    pair = Input(("question", "context"))
    assert pair.read("who?\tAda won.\tThen it rained.") == ("who?", "Ada won.\tThen it rained.")
    assert pair.read("") is None and TEXT.read("") == ""
    with pytest.raises(ValueError, match=r"expected 'question<TAB>context', got 'who\?'"):
        pair.read("who?")
