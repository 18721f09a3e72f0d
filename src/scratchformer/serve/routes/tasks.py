"""The task endpoints (the CLI's outputs as JSON) and the attention viewer, run by the
batching worker."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from .. import schema
from ..errors import ApiError
from ..http import post, run_batch
from ..served import ATTENTION, TASK, Served
from ..tasks import Endpoint, endpoints


def add_routes(app: FastAPI, served: Served) -> None:
    """The run's task endpoint first (routes are tried in order, and it is the busy one),
    the attention viewer, then every other task's endpoint as a 404 that says which runs
    have it."""
    if served.endpoint is not None:
        add_task_endpoint(app, served, served.endpoint, own=True)

    @post(app, "/v1/attention", schema.AttentionRequest)
    async def attention(body: schema.AttentionRequest, _: Request) -> Response:
        """The attention viewer (``scratchformer attention``'s page) on the body's text."""
        [html] = await run_batch(served.batched, [((ATTENTION,), (body.input, body.target))])
        return JSONResponse({"object": "attention", "model": served.name, "html": html})

    for endpoint in endpoints():
        if endpoint.prediction is not served.task.predicts:
            add_task_endpoint(app, served, endpoint, own=False)


def add_task_endpoint(app: FastAPI, served: Served, endpoint: Endpoint, own: bool) -> None:
    """``POST endpoint.path``: the outputs of the body's inputs if the endpoint is the
    run's ``own``, else a 404 naming the run's task."""

    @post(app, endpoint.path, endpoint.body)
    async def handle(body: schema.Body, _: Request) -> Response:
        if not own:
            run = f"{served.name} is a {served.task.name!r} run"
            raise ApiError(404, f"{run}: {endpoint.path} is another task's")
        items = [((TASK,), item) for item in endpoint.items(body)]
        outputs = await run_batch(served.batched, items)
        data = [{"index": i, **output} for i, output in enumerate(outputs)]
        return JSONResponse({"object": "list", "model": served.name, "data": data})
