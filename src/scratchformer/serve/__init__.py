"""``scratchformer serve``: a trained run behind an HTTP API that speaks OpenAI's where
OpenAI has the endpoint (completions, chat completions, embeddings, models) and the CLI's
outputs as JSON for the task commands (classify, tag, answer, translate, fill-mask,
fill-spans).

The pieces: :mod:`.app` (the application and the rules every request meets),
:mod:`.completions` (decoding endpoints), :mod:`.tasks` (task endpoints), :mod:`.workers`
(the threads that run the model: continuous batching for decoding, micro-batching for the
rest), :mod:`.schema` (request bodies), :mod:`.errors`, :mod:`.metrics`, :mod:`.page`.
FastAPI and uvicorn are imported only when a server is wanted.
"""

from .app import ServeOptions, create_app

__all__ = ["ServeOptions", "create_app"]
