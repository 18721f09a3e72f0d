"""Structured output's request fields: OpenAI's ``response_format`` and vLLM's
``guided_regex`` and ``guided_choice`` on both endpoints, read into a grammar, and refused
as 400s naming the field at fault."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scratchformer.data.tokenizer import Tokenizer
from scratchformer.inference.grammar import Grammar
from scratchformer.serve.errors import ApiError
from scratchformer.serve.schema import GRAMMAR_PARAMS, ChatRequest, CompletionRequest
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
    named = [] if grammar is None else [GRAMMAR_PARAMS[grammar.kind]]
    assert completion.unsupported() == chat.unsupported() == named  # refused until decoded


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
