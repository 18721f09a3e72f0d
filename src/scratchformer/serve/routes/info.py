"""What a server says of itself: health, Prometheus metrics, the page, the model list."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from ...training.rundir import CONFIG_FILE
from ..answers import Health, ModelList
from ..page import page
from ..served import Served


def add_routes(app: FastAPI, served: Served) -> None:
    """``GET /health``, ``/metrics``, ``/`` and ``/v1/models``."""

    @app.get("/health", response_model=None, responses={200: {"model": Health}})
    async def health() -> dict[str, Any]:
        """Up, and for a language model the requests decoding and waiting."""
        state: dict[str, Any] = {"status": "ok", "model": served.name, "task": served.task.name}
        if served.decoding is not None:
            engine = served.decoding.worker.engine
            state |= {"running": len(engine.live), "waiting": len(engine.waiting)}
        return state

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus() -> Response:
        return Response(served.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse)
    async def home() -> str:
        return page(served.name, served.task)

    @app.get("/v1/models", response_model=None, responses={200: {"model": ModelList}})
    async def models() -> dict[str, Any]:
        created = int((served.run_dir / CONFIG_FILE).stat().st_mtime)
        card = {"id": served.name, "object": "model", "created": created}
        return {"object": "list", "data": [{**card, "owned_by": "scratchformer"}]}
