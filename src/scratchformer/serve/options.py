"""How a run is served: the options of ``scratchformer serve``."""

from __future__ import annotations

from dataclasses import dataclass


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
    :data:`~scratchformer.serve.served.DEFAULT_CONTEXT`."""
    prefix_cache: int = 8192
    """Tokens of recent prompts whose keys and values are kept, so that a prompt that
    begins alike computes only the rest (:mod:`~scratchformer.inference.prefix_cache`);
    0: none kept."""
    verbose: bool = False
    """Say on stderr whether the model compiles, why, and what compiling took."""
