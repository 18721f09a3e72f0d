"""The server's routes, a module a kind: :mod:`.info` (health, metrics, the page, the
model list), :mod:`.openai` (completions, chat completions, embeddings) and :mod:`.tasks`
(the task endpoints and the attention viewer). Each adds its routes to an application for
a :class:`~scratchformer.serve.served.Served` run."""
