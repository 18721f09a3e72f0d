"""The server's application: a run made ready to serve (:mod:`.served`), the routes of
its kinds (:mod:`.routes`), and the rules every request meets (:mod:`.rules`: an API key,
a body-size limit, errors in OpenAI's shape, metrics).

    app = create_app(Path("runs/shakespeare"), ServeOptions(max_batch=16))
    uvicorn.run(app, host="127.0.0.1", port=8000)

``scratchformer serve RUN`` does just that (:mod:`scratchformer.commands.serve`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig

from .openapi import install_openapi
from .options import ServeOptions
from .routes import info, openai, tasks
from .rules import install_rules
from .served import serve_run

NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}
"""FastAPI's OpenTelemetry hooks, off: a command's server has no provider to report to
(its counts are at ``GET /metrics``), and asking whether one is set costs every request."""


def create_app(run_dir: Path, options: ServeOptions | None = None) -> FastAPI:
    """The application serving ``run_dir``'s best model, as ``options`` say (default:
    :class:`ServeOptions`' defaults)."""
    options = options or ServeOptions()
    served = serve_run(run_dir, options)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        served.start()
        yield
        served.stop()

    app = FastAPI(
        title=f"scratchformer: {served.name}",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        telemetry=NO_TELEMETRY,
    )
    install_rules(app, options, served.metrics)
    tasks.add_routes(app, served)  # first: the task endpoint is the busy route
    info.add_routes(app, served)
    openai.add_routes(app, served)
    install_openapi(app)
    return app
