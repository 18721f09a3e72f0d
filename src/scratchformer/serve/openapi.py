"""The server's OpenAPI description at ``GET /openapi.json``: FastAPI's of its own (GET)
routes, and that of the POST routes that read their bodies themselves
(:class:`~.http.BodyRoute`), which FastAPI does not see, each with its body's JSON schema
and its answer's (:mod:`.answers`); and, on every route, OpenAI's error shape
(:class:`~.errors.ErrorAnswer`) for each error it may answer."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from .answers import STREAMS, answer_of
from .errors import ErrorAnswer
from .http import BodyRoute
from .rules import OPEN_PATHS

REF = "#/components/schemas/{model}"
ERRORS = {
    400: "The body does not validate (`param` names the field at fault), or the model "
    "refuses its inputs.",
    401: "No API key, or a wrong one (a server started with `--api-key`).",
    404: "This run's task does not serve the endpoint.",
    411: "No Content-Length header.",
    413: "The body is over the server's limit.",
    429: "The queue is full: try again after `Retry-After` seconds.",
    500: "The server failed.",
    504: "No answer within the server's timeout.",
}
"""The errors a route may answer, each in OpenAI's shape: a POST route all of them, a
GET route only the 401 (:func:`errors_of`)."""
RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}}


def install_openapi(app: FastAPI) -> None:
    """``app.openapi()`` (what ``/openapi.json`` answers): :func:`described`, made once."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = described(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def described(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI description of every route of ``app``."""
    spec = get_openapi(title=app.title, version=app.version, routes=app.routes)
    posted = [route for route in app.routes if isinstance(route, BodyRoute)]
    models: list[tuple[type, JsonSchemaMode]] = [(ErrorAnswer, "serialization")]
    models += [(route.body, "validation") for route in posted]
    models += [(answer_of(route.path), "serialization") for route in posted]
    models += [(chunk, "serialization") for chunk in STREAMS.values()]
    refs, definitions = models_json_schema(models, ref_template=REF)
    spec.setdefault("components", {}).setdefault("schemas", {}).update(definitions["$defs"])
    error = refs[ErrorAnswer, "serialization"]
    paths = spec.setdefault("paths", {})
    for route in posted:
        answer = {"application/json": {"schema": refs[answer_of(route.path), "serialization"]}}
        if route.path in STREAMS:
            chunk = refs[STREAMS[route.path], "serialization"]
            answer["text/event-stream"] = {"schema": event(chunk, error)}
        paths.setdefault(route.path, {})["post"] = {
            "description": route.description or "",
            "operationId": "post" + route.path.replace("/", "_").replace("-", "_"),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": refs[route.body, "validation"]}},
            },
            "responses": {"200": {"description": "Successful Response", "content": answer}},
        }
    for path, operations in paths.items():
        for method, operation in operations.items():
            for status in errors_of(path, method):
                operation["responses"][str(status)] = {
                    "description": ERRORS[status],
                    "content": {"application/json": {"schema": error}},
                    **({"headers": RETRY_AFTER} if status == 429 else {}),
                }
    return spec


def event(chunk: dict[str, Any], error: dict[str, Any]) -> dict[str, Any]:
    """A server-sent event of a stream: a chunk, or an error once the stream has begun,
    as JSON; or the ``[DONE]`` marker that ends the stream."""
    payload = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {"anyOf": [chunk, error]},
    }
    data = {"anyOf": [{"const": "[DONE]"}, payload]}
    return {"type": "object", "required": ["data"], "properties": {"data": data}}


def errors_of(path: str, method: str) -> list[int]:
    """The statuses of the errors that ``method path`` may answer."""
    if method == "post":
        return list(ERRORS)
    return [] if path in OPEN_PATHS else [401]
