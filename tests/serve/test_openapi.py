"""The OpenAPI description at ``/openapi.json``: every route, its body's JSON schema, its
answers and errors (the schema fuzz, test_openapi_fuzz.py, sends what it describes); and
the errors of bodies that the fuzz found answered otherwise."""

from __future__ import annotations

import json
import urllib.request

import pytest
from pydantic import BaseModel

from helpers import http
from scratchformer.serve import schema
from scratchformer.serve.answers import STREAMS, answer_of
from scratchformer.serve.errors import TYPES, ApiError, ErrorAnswer
from scratchformer.serve.tasks import endpoints

REF = "#/components/schemas/{model}"
CONTENT = "messages.0.content"


def resolved(spec: dict, ref: dict) -> dict:
    return spec["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]


def own_schema(model: type[BaseModel], mode: str) -> dict:
    """``model``'s JSON schema, without the definitions it refers to."""
    found = model.model_json_schema(ref_template=REF, mode=mode)
    found.pop("$defs", None)
    return found


@pytest.fixture(scope="module")
def spec(lm_url: str) -> dict:
    with urllib.request.urlopen(f"{lm_url}/openapi.json") as response:
        return json.loads(response.read())


BODIES = {
    "/v1/completions": schema.CompletionRequest,
    "/v1/chat/completions": schema.ChatRequest,
    "/v1/embeddings": schema.EmbeddingRequest,
    "/v1/attention": schema.AttentionRequest,
} | {endpoint.path: endpoint.body for endpoint in endpoints()}


def test_every_post_route_documents_its_body_answer_and_errors(spec: dict) -> None:
    paths = spec["paths"]
    assert {path for path, item in paths.items() if "post" in item} == set(BODIES)
    error = own_schema(ErrorAnswer, "serialization")
    for path, body in BODIES.items():
        operation = paths[path]["post"]
        sent = operation["requestBody"]["content"]["application/json"]["schema"]
        assert resolved(spec, sent) == own_schema(body, "validation"), path
        answers = operation["responses"]
        answer = answers["200"]["content"]["application/json"]["schema"]
        assert resolved(spec, answer) == own_schema(answer_of(path), "serialization"), path
        assert ("text/event-stream" in answers["200"]["content"]) == (path in STREAMS), path
        for status in ("400", "401", "404", "413", "429"):
            refused = answers[status]["content"]["application/json"]["schema"]
            assert resolved(spec, refused) == error, (path, status)


def test_the_get_routes_document_their_answers(spec: dict) -> None:
    paths = spec["paths"]
    assert {path for path, item in paths.items() if "get" in item} == {
        "/",
        "/health",
        "/metrics",
        "/v1/models",
    }
    assert "text/html" in paths["/"]["get"]["responses"]["200"]["content"]
    assert "text/plain" in paths["/metrics"]["get"]["responses"]["200"]["content"]
    models = paths["/v1/models"]["get"]["responses"]
    assert resolved(spec, models["200"]["content"]["application/json"]["schema"])["required"] == [
        "object",
        "data",
    ]
    assert "401" in models and "401" not in paths["/health"]["get"]["responses"]


@pytest.mark.parametrize("status", sorted(TYPES))
def test_every_error_is_in_the_documented_shape(status: int) -> None:
    body = ApiError(status, "a message", "field").body()
    assert ErrorAnswer.model_validate(body).model_dump() == body


def test_a_method_not_allowed_says_which_is(lm_url: str) -> None:
    request = urllib.request.Request(f"{lm_url}/v1/completions", method="DELETE")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request)
    assert raised.value.code == 405 and raised.value.headers["Allow"] == "POST"
    assert json.loads(raised.value.read())["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {"prompt": 5}, "prompt"),
        ("/v1/completions", {"prompt": []}, "prompt"),
        ("/v1/completions", {"prompt": "to", "stop": ["a"] * 5}, "stop"),
        ("/v1/completions", {"prompt": "to", "top_p": 0}, "top_p"),
        ("/v1/completions", {"prompt": "to", "presence_penalty": 0.5}, "presence_penalty"),
        ("/v1/completions", {"prompt": "to", "logit_bias": {"": "x"}}, "logit_bias"),
        ("/v1/completions", {"prompt": "to", "logprobs": False}, "logprobs"),
        ("/v1/completions", {"prompt": "to", "echo": 1}, "echo"),
        ("/v1/chat/completions", {"messages": [{"role": "user"}], "n": True}, "n"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, CONTENT),
        ("/v1/answer", {"input": {"question": "who?"}}, "input.context"),
        ("/v1/answer", {"input": [{"question": "who?", "context": 3}]}, "input"),
    ],
)
def test_a_refused_body_names_the_field_as_the_body_has_it(
    lm_url: str, path: str, body: dict, param: str
) -> None:
    status, answer = http(f"{lm_url}{path}", body)
    assert status == 400 and answer["error"]["param"] == param, answer


def test_an_object_input_is_read_whole_not_measured(lm_url: str) -> None:
    """An input of fields is an object, not a text or list to take the length of."""
    status, answer = http(f"{lm_url}/v1/answer", {"input": {"question": "", "context": ""}})
    assert status == 404 and "is another task's" in answer["error"]["message"]
