"""The plumbing of the routes: a POST body read by pydantic in one call, and the batching
worker's answers turned into HTTP errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from .errors import ApiError
from .workers import BatchWorker, Busy

Handler = Callable[[Any, Request], Awaitable[Response]]


def post(app: FastAPI, path: str, body: type[BaseModel]) -> Callable[[Handler], Handler]:
    """Register ``handler(body, request)`` at ``POST path``, the body read from the
    request's JSON by pydantic in one call; a body that does not validate is a 400 naming
    the first field at fault. (A plain route: FastAPI's own reading of bodies and writing
    of answers costs a small model's server requests a second; docs/lab-notes.md, "Bodies
    read on plain routes".)"""

    def register(handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                parsed = body.model_validate_json(await request.body())
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "body"
                raise ApiError(400, f"{where}: {first['msg']}", where) from None
            return await handler(parsed, request)

        app.router.add_route(path, endpoint, methods=["POST"])
        return handler

    return register


async def run_batch(worker: BatchWorker, items: list[Any]) -> list[Any]:
    """``worker``'s outputs for ``items``: 429 when its queue is full, 400 when the
    inputs are refused (a ValueError of the task's, in one line)."""
    try:
        return await worker(items)
    except Busy as error:
        raise ApiError(429, f"the server is busy ({error}): try again shortly") from None
    except ValueError as error:
        raise ApiError(400, str(error).splitlines()[0]) from None
