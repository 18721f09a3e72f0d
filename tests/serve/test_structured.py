"""Structured output's request fields: OpenAI's ``response_format`` and vLLM's
``guided_regex`` and ``guided_choice`` on both endpoints, read into a grammar, and refused
as 400s naming the field at fault."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator

import jsonschema
import openai
import pytest
from pydantic import ValidationError

from conftest import LM_TEXT
from helpers import live, train
from scratchformer.data.tokenizer import Tokenizer
from scratchformer.inference.grammar import Grammar
from scratchformer.serve.errors import ApiError
from scratchformer.serve.schema import ChatRequest, CompletionRequest
from scratchformer.serve.structured import request_grammar

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    text = 'the quick brown fox {"a": 1, "b": [true, null]} jumps over the lazy dog 0123456789'
    return Tokenizer.train("bpe", [text] * 4, 300, ("pad", "eos"))


@pytest.mark.parametrize(
    ("fields", "grammar"),
    [
        ({}, None),
        ({"response_format": {"type": "text"}}, None),
        ({"response_format": {"type": "json_object"}}, Grammar("json_object")),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True},
                }
            },
            Grammar("json_schema", SCHEMA),
        ),
        ({"guided_regex": "[0-9]+"}, Grammar("regex", "[0-9]+")),
        ({"guided_choice": ["yes", "no"]}, Grammar("choice", ["yes", "no"])),
        ({"response_format": {"type": "text"}, "guided_regex": "a"}, Grammar("regex", "a")),
    ],
)
def test_both_endpoints_read_the_grammar(fields, grammar) -> None:
    completion = CompletionRequest.model_validate({"prompt": "x", **fields})
    chat = ChatRequest.model_validate({**CHAT, **fields})
    assert completion.grammar() == chat.grammar() == grammar
    assert completion.unsupported() == chat.unsupported() == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
        ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_choice"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"guided_choice": []}, "guided_choice"),
    ],
)
def test_malformed_fields_name_themselves(fields, field) -> None:
    with pytest.raises(ValidationError) as raised:
        CompletionRequest.model_validate({"prompt": "x", **fields})
    assert raised.value.errors()[0]["loc"][0] == field


@pytest.mark.parametrize(
    ("fields", "param", "reason"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "bad", "schema": {"type": "foo"}},
                }
            },
            "response_format",
            "Invalid type: foo",
        ),
        ({"guided_regex": "(ab"}, "guided_regex", "unclosed group"),
    ],
)
def test_what_cannot_compile_is_a_400_naming_the_field(tokenizer, fields, param, reason) -> None:
    body = CompletionRequest.model_validate({"prompt": "x", **fields})
    with pytest.raises(ApiError) as raised:
        request_grammar(body, tokenizer)
    error = raised.value
    assert (error.status, error.param) == (400, param)
    assert error.message.startswith(f"{param}: ") and reason in error.message
    assert "\n" not in error.message


def test_a_compiling_grammar_passes(tokenizer) -> None:
    body = ChatRequest.model_validate({**CHAT, "guided_choice": ["yes", "no"]})
    assert request_grammar(body, tokenizer) == Grammar("choice", ["yes", "no"])
    assert request_grammar(ChatRequest.model_validate(CHAT), tokenizer) is None


SERVED_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number", "minimum": 0, "maximum": 4, "multipleOf": 0.25},
        "role": {"enum": ["admin", "user", 3]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 4},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "score", "role", "tags", "address"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def json_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A tiny Llama-style run of a context that holds a JSON object, with a chat template,
    served."""
    text = tmp_path_factory.mktemp("json-text") / "text.txt"
    text.write_text(LM_TEXT, encoding="utf-8")
    run_dir = tmp_path_factory.mktemp("runs") / "json"
    settings = [f"data.train='{text}'", f"data.val='{text}'", "data.dataset=none"]
    settings += ["data.tokenizer=bpe", "data.vocab_size=300", "data.lm.block_size=16"]
    train(run_dir, "shakespeare-llama.toml", *settings, "model.max_len=256")
    template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    (run_dir / "chat_template.jinja").write_text(template)
    with live(run_dir, max_batch=16) as url:
        yield url


@pytest.mark.bench
def test_sampled_completions_under_a_schema_parse_and_validate(json_url) -> None:
    """100 completions sampled at temperature 1 (ten requests of ten choices) on both
    endpoints, through the official client: each parses and validates."""
    api = openai.OpenAI(base_url=f"{json_url}/v1", api_key="none", max_retries=0)
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": SERVED_SCHEMA, "strict": True},
    }
    texts = []
    for seed in range(5):
        options = {"max_tokens": 200, "temperature": 1.0, "n": 10, "seed": 10 * seed}
        answer = api.completions.create(
            model="m", prompt="to be", extra_body={"response_format": response_format}, **options
        )
        texts += [(c.text, c.finish_reason) for c in answer.choices]
        chat = api.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "who?"}],
            response_format=response_format,
            **options,
        )
        texts += [(c.message.content, c.finish_reason) for c in chat.choices]
    assert len(texts) == 100
    for text, reason in texts:
        assert reason == "stop", text
        jsonschema.validate(json.loads(text), SERVED_SCHEMA)


@pytest.mark.bench
def test_regex_choice_and_json_object_are_followed_and_bad_ones_are_400s(json_url) -> None:
    api = openai.OpenAI(base_url=f"{json_url}/v1", api_key="none", max_retries=0)
    ask = functools.partial(api.completions.create, model="m", prompt="to", temperature=1.0)
    regex = ask(max_tokens=20, n=4, seed=1, extra_body={"guided_regex": "[a-c]{2,4}-[0-9]{2}"})
    assert all(re.fullmatch("[a-c]{2,4}-[0-9]{2}", c.text) for c in regex.choices)
    choice = ask(max_tokens=20, n=4, seed=2, extra_body={"guided_choice": ["yes", "no way"]})
    assert {c.text for c in choice.choices} <= {"yes", "no way"}
    anything = ask(max_tokens=100, seed=3, extra_body={"response_format": {"type": "json_object"}})
    if anything.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(anything.choices[0].text), dict)
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}}
    with pytest.raises(openai.BadRequestError, match="response_format") as caught:
        ask(max_tokens=5, extra_body={"response_format": bad})
    assert caught.value.body["param"] == "response_format"
