"""``scratchformer serve``: a trained run behind an HTTP API that speaks OpenAI's where
OpenAI has the endpoint (completions, chat completions, embeddings, models) and the CLI's
outputs as JSON for the task commands (classify, tag, answer, translate, fill-mask,
fill-spans).

The pieces: :mod:`.app` (the application), :mod:`.served` (a run made ready to serve),
:mod:`.routes` (the routes, a module a kind), :mod:`.rules` (what every request meets),
:mod:`.completions` (decoding), :mod:`.tasks` (the task endpoints' work), :mod:`.workers`
(the threads that run the model: continuous batching for decoding, micro-batching for the
rest), :mod:`.schema` (request bodies), :mod:`.options`, :mod:`.http`, :mod:`.errors`,
:mod:`.metrics`, :mod:`.page`.
FastAPI and uvicorn are imported only when a server is wanted.
"""

from .app import create_app
from .options import ServeOptions

__all__ = ["ServeOptions", "create_app"]
