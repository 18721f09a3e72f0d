"""The plumbing of the routes: a POST body read by pydantic in one call, and the batching
worker's answers turned into HTTP errors."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from starlette.routing import Route

from .errors import ApiError
from .workers import BatchWorker, Busy

Handler = Callable[[Any, Request], Awaitable[Response]]


class BodyRoute(Route):
    """A plain POST route and the model of its body, which ``/openapi.json`` describes
    (:mod:`.openapi`): FastAPI describes only its own routes."""

    def __init__(
        self,
        path: str,
        endpoint: Callable[[Request], Awaitable[Response]],
        body: type[BaseModel],
        description: str | None,
    ) -> None:
        super().__init__(path, endpoint, methods=["POST"])
        self.body = body
        self.description = description


def post(app: FastAPI, path: str, body: type[BaseModel]) -> Callable[[Handler], Handler]:
    """Register ``handler(body, request)`` at ``POST path``, the body read from the
    request's JSON by pydantic in one call; a body that does not validate is a 400 naming
    the first field at fault. (A plain route: FastAPI's own reading of bodies and writing
    of answers costs a small model's server requests a second; docs/lab-notes.md, "Bodies
    read on plain routes".)"""

    def register(handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            raw = await request.body()
            try:
                parsed = body.model_validate_json(raw)
            except ValidationError as error:
                first = error.errors()[0]
                where = field_path(first["loc"], raw, first["type"] == "missing") or "body"
                raise ApiError(400, f"{where}: {first['msg']}", where) from None
            return await handler(parsed, request)

        app.router.routes.append(BodyRoute(path, endpoint, body, inspect.getdoc(handler)))
        return handler

    return register


def field_path(loc: tuple[int | str, ...], raw: bytes, missing: bool) -> str:
    """The path in the body (``messages.0.content``) of a pydantic error's location, less
    the names pydantic gives the members of a union (``prompt.list[constrained-str]``),
    which the body does not have; a field that is ``missing`` is named all the same. A
    key that is no word (``""`` in ``logit_bias``) ends the path at what holds it."""
    value = json.loads(raw) if loc else None
    parts: list[str] = []
    for i, part in enumerate(loc):
        listed = isinstance(value, list) and isinstance(part, int) and part < len(value)
        if listed or (isinstance(value, dict) and part in value):
            if not re.fullmatch(r"\w+", str(part)):
                break
            value = value[part]
        elif not (missing and i == len(loc) - 1):
            continue  # a union member's name
        parts.append(str(part))
    return ".".join(parts)


async def run_batch(worker: BatchWorker, items: list[Any]) -> list[Any]:
    """``worker``'s outputs for ``items``: 429 when its queue is full, 400 when the
    inputs are refused (a ValueError of the task's, in one line)."""
    try:
        return await worker(items)
    except Busy as error:
        raise ApiError(429, f"the server is busy ({error}): try again shortly") from None
    except ValueError as error:
        raise ApiError(400, str(error).splitlines()[0]) from None
