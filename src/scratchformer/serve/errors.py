"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}`` with the
HTTP status that OpenAI's clients turn into their exception types (400 bad request, 401
authentication, 404 not found, 413 too large, 429 rate limit, 5xx server)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
    504: "timeout_error",
}
RETRY_AFTER_S = 1
"""What a 429 asks the client to wait, in seconds."""


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    """The field of the body at fault (``max_tokens``, ``messages.0.role``), if one is."""
    code: str | None


class ErrorAnswer(BaseModel):
    """The answer of every error, as OpenAI's API sends it."""

    error: ErrorDetail


class ApiError(Exception):
    """A request the server answers with ``status`` and one line, ``message``, naming the
    field at fault (``param``) where there is one."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        """The error as :class:`ErrorAnswer` says."""
        kind = TYPES.get(self.status, "invalid_request_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": None}}

    def response(self) -> JSONResponse:
        headers = {"Retry-After": str(RETRY_AFTER_S)} if self.status == 429 else None
        return JSONResponse(self.body(), status_code=self.status, headers=headers)
