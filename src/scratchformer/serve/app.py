"""The server's application: a run loaded once, the endpoints its task has, and the rules
every request meets (an API key, a body-size limit, errors in OpenAI's shape, metrics).

    app = create_app(Path("runs/shakespeare"), ServeOptions(max_batch=16))
    uvicorn.run(app, host="127.0.0.1", port=8000)

``scratchformer serve RUN`` does just that (:mod:`scratchformer.commands.serve`).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hmac
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.telemetry import TelemetryConfig
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..device import bf16_autocast, default_device, uses_bf16
from ..run import load_run
from ..tasks.base import Task
from ..training.rundir import CONFIG_FILE, read_chat_template
from ..viz import attention_page, capture_attention
from . import schema
from .compiling import ready
from .completions import Choice, Decoding, identity, sse
from .errors import ApiError
from .metrics import Metrics
from .page import page
from .tasks import ENDPOINTS, grouped
from .workers import BatchWorker, Busy, DecodingWorker, ModelUse, Usage, in_a_passing_thread

TASK, EMBED, ATTENTION = "task", "embed", "attention"
"""The kinds of work of the batching worker."""
DEFAULT_CONTEXT = 2048
"""The context of a request unless ``--context`` says otherwise: an imported model's
``max_len`` can be tens of thousands of positions, which a KV cache of every row would
hold in full."""
OPEN_PATHS = {"/", "/health"}
"""Paths that need no API key."""
NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}
"""FastAPI's OpenTelemetry hooks, off: a command's server has no provider to report to
(its counts are at ``GET /metrics``), and asking whether one is set costs every request."""


@dataclass(frozen=True)
class ServeOptions:
    """How a run is served (the options of ``scratchformer serve``)."""

    quantize: str | None = None
    compile: str = "auto"
    """The model through ``torch.compile``, compiled before the server answers: "always",
    "never", or "auto", if the last such server's work here would have repaid it
    (:mod:`~scratchformer.serve.compiling`)."""
    precision: str = "fp32"
    device: str = "auto"
    api_key: str | None = None
    max_batch: int = 8
    """Requests decoded together (rows of the KV cache), or inputs run in one call."""
    max_queue: int = 64
    """Requests (decoding) or inputs (other endpoints) that may wait; beyond: 429."""
    batch_wait_ms: float = 0.0
    """How long a batching call waits for more inputs once it has one. With none, a call
    takes what is waiting; the inputs that arrive while it runs make the next call."""
    timeout_s: float = 300.0
    """A request still unanswered after this is answered 504."""
    max_body_bytes: int = 4_000_000
    context: int | None = None
    """Positions a request may use, prompt and new tokens (the KV cache holds this many
    for each of ``max_batch`` rows); None: the model's ``max_len``, at most
    :data:`DEFAULT_CONTEXT`."""
    verbose: bool = False
    """Say on stderr whether the model compiles, why, and what compiling took."""


def create_app(run_dir: Path, options: ServeOptions = ServeOptions()) -> FastAPI:
    """The application serving ``run_dir``'s best model."""
    task, model = in_a_passing_thread(lambda: load_run(run_dir, quantization=options.quantize))
    device = default_device(options.device)
    model = model.to(device)
    bf16 = uses_bf16(options.precision, device)

    @contextlib.contextmanager
    def computing() -> Iterator[None]:
        """The setting the model runs in, on the worker's thread (autocast is per thread)."""
        with torch.no_grad(), bf16_autocast(device, bf16):
            yield

    name = run_dir.absolute().name
    metrics = Metrics()
    usage = Usage()
    use = ModelUse(computing, threading.Lock(), metrics, usage)
    """The decoding and batching threads of a language model's server take turns on the
    model (decoding installs its kernels on it)."""
    context = None
    if task.command == "generate":
        context = options.context or min(model.config.max_len, DEFAULT_CONTEXT)
        if context > model.config.max_len:
            raise ValueError(
                f"--context {context} exceeds the model's max_len={model.config.max_len}"
            )
    serving = in_a_passing_thread(
        lambda: ready(
            task,
            model,
            computing,
            options.compile,
            options.verbose,
            options.max_batch,
            context,
            quantize=options.quantize,
            bf16=bf16,
        )
    )
    workers: list[Any] = []
    decoding = None
    if serving.batcher is not None and context is not None:
        worker = DecodingWorker(serving.batcher, options.max_queue, use)
        tokenizer = task.tokenizer()
        decoding = Decoding(
            tokenizer, worker, context, name, options.timeout_s, read_chat_template(run_dir)
        )
        workers.append(worker)

    endpoint = ENDPOINTS.get(task.command)
    work: dict[str, Callable[[list[Any]], list[Any]]] = {}
    """What the batching worker does, by kind: the task endpoint's work, embeddings, the
    attention viewer."""
    if serving.predict is not None:
        work[TASK] = usage.timed(serving.predict)
    if serving.embed is not None:
        work[EMBED] = usage.timed(serving.embed)

    def viewer(text: str, target: str | None) -> str:
        return attention_page(capture_attention(task, model, text, target), f"{name}: {text}")

    work[ATTENTION] = lambda inputs: [viewer(text, target) for text, target in inputs]
    batched = BatchWorker(
        functools.partial(grouped, lambda kind, inputs: work[kind[0]](inputs)),
        options.max_batch,
        options.max_queue,
        options.batch_wait_ms,
        use,
    )
    workers.append(batched)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for worker in workers:
            worker.start()
        yield
        for worker in workers:
            worker.stop()
        serving.record(usage)

    app = FastAPI(
        title=f"scratchformer: {name}",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        telemetry=NO_TELEMETRY,
    )
    install_rules(app, options, metrics)
    if endpoint is not None:  # the first route: routes are tried in order, and it is the busy one
        add_task_endpoint(app, task, name, endpoint, batched)

    def needs(what: str, path: str) -> ApiError:
        return ApiError(404, f"{name} is a {task.name!r} run: {path} needs {what}")

    app.state.decoding = decoding

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Up, and for a language model the requests decoding and waiting."""
        state: dict[str, Any] = {"status": "ok", "model": name, "task": task.name}
        if decoding is not None:
            batcher = decoding.worker.batcher
            state |= {"running": len(batcher.live), "waiting": len(batcher.waiting)}
        return state

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.text(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse)
    async def home() -> str:
        return page(name, task, endpoint.path if endpoint else None)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        created = int((run_dir / CONFIG_FILE).stat().st_mtime)
        card = {"id": name, "object": "model", "created": created, "owned_by": "scratchformer"}
        return {"object": "list", "data": [card]}

    @post(app, "/v1/completions", schema.CompletionRequest)
    async def completions(body: schema.CompletionRequest, request: Request) -> Response:
        if decoding is None:
            raise needs("a language-model run", "/v1/completions")
        prompts = decoding.prompts(body)
        prefixes = [decoding.tokenizer.decode(p) if body.echo else "" for p in prompts]
        choices = decoding.choices(prompts, body, body.max_tokens or 16, prefixes)

        def choice_json(choice: Choice, text: str) -> dict[str, Any]:
            reason = choice.finish_reason
            return {"text": text, "index": choice.index, "logprobs": None, "finish_reason": reason}

        head = {**identity("cmpl"), "object": "text_completion", "model": name}
        if body.stream:
            return streaming(decoding, choices, head, choice_json)
        answers = await decoding.complete(choices, choice_json, request.is_disconnected)
        usage = decoding.usage(choices, prompts)
        return JSONResponse({**head, "choices": answers, "usage": usage})

    @post(app, "/v1/chat/completions", schema.ChatRequest)
    async def chat(body: schema.ChatRequest, request: Request) -> Response:
        if decoding is None:
            raise needs("a language-model run", "/v1/chat/completions")
        prompt = decoding.chat_prompt(body)
        max_tokens = body.max_completion_tokens or body.max_tokens
        choices = decoding.choices([prompt], body, max_tokens, [""])
        head = {**identity("chatcmpl"), "object": "chat.completion", "model": name}
        if body.stream:

            def delta(choice: Choice, text: str) -> dict[str, Any]:
                content = {"role": "assistant", "content": text} if text else {}
                return {
                    "index": choice.index,
                    "delta": content,
                    "finish_reason": choice.finish_reason,
                }

            return streaming(decoding, choices, {**head, "object": "chat.completion.chunk"}, delta)

        def message(choice: Choice, text: str) -> dict[str, Any]:
            return {
                "index": choice.index,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": choice.finish_reason,
            }

        answers = await decoding.complete(choices, message, request.is_disconnected)
        usage = decoding.usage(choices, [prompt])
        return JSONResponse({**head, "choices": answers, "usage": usage})

    @post(app, "/v1/embeddings", schema.EmbeddingRequest)
    async def embeddings(body: schema.EmbeddingRequest, _: Request) -> Response:
        if EMBED not in work:
            raise needs("a sentence encoder's run (similarity, classification)", "/v1/embeddings")
        if body.dimensions is not None:
            raise ApiError(400, "dimensions: not supported by this server", "dimensions")
        texts = [body.input] if isinstance(body.input, str) else body.input
        vectors = await run_batch(batched, [((EMBED,), text) for text in texts])
        data = [
            {"object": "embedding", "index": i, "embedding": encoded(v, body.encoding_format)}
            for i, v in enumerate(vectors)
        ]
        tokens = sum(len(task.tokenizer().encode(text)) for text in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return JSONResponse({"object": "list", "data": data, "model": name, "usage": usage})

    @post(app, "/v1/attention", schema.AttentionRequest)
    async def attention(body: schema.AttentionRequest, _: Request) -> Response:
        """The attention viewer (``scratchformer attention``'s page) on the body's text."""
        [html] = await run_batch(batched, [((ATTENTION,), (body.input, body.target))])
        return JSONResponse({"object": "attention", "model": name, "html": html})

    for command, each in ENDPOINTS.items():
        if command != task.command:
            add_task_endpoint(app, task, name, each, None)
    return app


def add_task_endpoint(
    app: FastAPI, task: Task, name: str, endpoint: Any, worker: BatchWorker | None
) -> None:
    """``POST endpoint.path``: the outputs of the body's inputs, or a 404 that says which
    runs have the endpoint when ``task``'s do not."""

    @post(app, endpoint.path, endpoint.body)
    async def handle(body: schema.Body, _: Request) -> Response:
        if worker is None:
            raise ApiError(404, f"{name} is a {task.name!r} run: {endpoint.path} is another task's")
        outputs = await run_batch(worker, [((TASK,), item) for item in endpoint.items(body)])
        data = [{"index": i, **output} for i, output in enumerate(outputs)]
        return JSONResponse({"object": "list", "model": name, "data": data})


Handler = Callable[[Any, Request], Awaitable[Response]]


def post(app: FastAPI, path: str, body: type[BaseModel]) -> Callable[[Handler], Handler]:
    """Register ``handler(body, request)`` at ``POST path``, the body read from the
    request's JSON by pydantic in one call; a body that does not validate is a 400 naming
    the first field at fault. (A plain route: FastAPI's own reading of bodies and writing
    of answers costs a small model's server a tenth of its requests a second.)"""

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


def encoded(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    """An embedding as OpenAI sends it: floats, or base64 of little-endian float32."""
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def streaming(
    decoding: Decoding,
    choices: list[Choice],
    head: dict[str, Any],
    build: Callable[[Choice, str], dict[str, Any]],
) -> StreamingResponse:
    """Server-sent events, one chunk each time a choice moves on with text or ends, then
    ``[DONE]``; an error after the first chunk is sent as an event of its own. The
    requests are queued before the response starts, so that a full queue is a 429."""
    queue = decoding.submit(choices)

    async def events() -> AsyncIterator[str]:
        try:
            async for choice in decoding.progress(choices, queue):
                text = "".join(choice.pieces[-1:])
                if not choice.pieces[:-1] and choice.prefix:  # the echoed prompt, first
                    text = choice.prefix + text
                if text or choice.finish_reason is not None:
                    yield sse({**head, "choices": [build(choice, text)]})
        except ApiError as error:
            yield sse(error.body())
        yield sse("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")


def install_rules(app: FastAPI, options: ServeOptions, metrics: Metrics) -> None:
    """What every request meets: the API key, the body-size limit, the metrics, and
    errors in OpenAI's shape."""

    app.add_middleware(Rules, options=options, metrics=metrics)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, error: ApiError) -> JSONResponse:
        return error.response()

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, error: HTTPException) -> JSONResponse:
        return ApiError(error.status_code, str(error.detail)).response()

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

        refused = refusal(Request(scope), self.options)
        try:
            if refused is None:
                await self.app(scope, receive, sending)
            else:
                await refused(scope, receive, sending)
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
