"""What every request meets: the API key, the body-size limit, the metrics, and errors in
OpenAI's shape."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ApiError
from .metrics import Metrics
from .options import ServeOptions

OPEN_PATHS = {"/", "/health"}
"""Paths that need no API key."""
DRAINED_BYTES = 64_000_000
DRAINED_S = 10.0
"""How much of a refused request's body is read and dropped, at most, before its
connection closes (:func:`refuse`)."""


def install_rules(app: FastAPI, options: ServeOptions, metrics: Metrics) -> None:
    """The middleware of :class:`Rules`, and every error answered in OpenAI's shape."""

    app.add_middleware(Rules, options=options, metrics=metrics)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, error: ApiError) -> JSONResponse:
        return error.response()

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, error: HTTPException) -> JSONResponse:
        """Starlette's errors (404, 405), with their headers (a 405's ``Allow``)."""
        response = ApiError(error.status_code, str(error.detail)).response()
        response.headers.update(error.headers or {})
        return response

    @app.exception_handler(Exception)
    async def failure(_: Request, error: Exception) -> JSONResponse:
        return ApiError(500, f"{type(error).__name__}: {error}".splitlines()[0]).response()


class Rules:
    """ASGI middleware: requests refused before they are read (:func:`refusal`), and the
    count and latency of every request by endpoint and status. (Pure ASGI, so that a
    client that goes away mid-stream cancels its stream at once.)"""

    def __init__(self, app: ASGIApp, options: ServeOptions, metrics: Metrics) -> None:
        self.app = app
        self.options = options
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.monotonic()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        request = Request(scope)
        refused = refusal(request, self.options)
        try:
            if refused is None:
                await self.app(scope, receive, sending)
            else:
                await refuse(refused, request, receive, sending)
        finally:
            endpoint = scope["path"] if "endpoint" in scope else "other"  # (a route's)
            self.metrics.answered(endpoint, status[0], time.monotonic() - start)


def refusal(request: Request, options: ServeOptions) -> Response | None:
    """The answer to a request refused before it is read: a missing or wrong API key (the
    comparison takes the same time whatever the key), a body over the limit."""
    if options.api_key is not None and request.url.path not in OPEN_PATHS:
        given = request.headers.get("authorization", "")
        expected = f"Bearer {options.api_key}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            return ApiError(401, "a valid API key is needed: Authorization: Bearer KEY").response()
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > options.max_body_bytes):
        limit = options.max_body_bytes
        return ApiError(413, f"the body is over the limit of {limit} bytes").response()
    if length is None and request.method == "POST":
        return ApiError(411, "a POST needs a Content-Length header").response()
    return None


async def refuse(answer: Response, request: Request, receive: Receive, send: Send) -> None:
    """Send ``answer`` to a request whose body is not wanted, then read and drop the body
    (up to :data:`DRAINED_BYTES`, for :data:`DRAINED_S`) before the answer ends and the
    connection closes. A client that sends its whole body before it reads (urllib,
    requests) then reads the answer: closing a socket with data unread resets it, and the
    client sees the reset, not the answer. A client that asked ``Expect: 100-continue``
    has sent no body, and gets the answer at once."""
    answer.headers["connection"] = "close"

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body"):
            await send({**message, "more_body": True})
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(drain(request, receive), DRAINED_S)
            message = {"type": "http.response.body", "body": b"", "more_body": False}
        await send(message)

    await answer(request.scope, receive, sending)


async def drain(request: Request, receive: Receive) -> None:
    """Read a request's body to its end, or to :data:`DRAINED_BYTES`; none if the client
    waits for a ``100 Continue`` before it sends one (reading would ask for it)."""
    if request.headers.get("expect", "").lower() == "100-continue":
        return
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > DRAINED_BYTES:
        return
    read = 0
    while read <= DRAINED_BYTES:
        message = await receive()
        read += len(message.get("body", b""))
        if not message.get("more_body"):
            return
