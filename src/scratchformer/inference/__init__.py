"""Decoding: key/value caches, generation, beam search, continuous batching, the kernels
they install (``kernels``), int8 weights (``quantize``), and compiled decoding
(``CompiledModel``, or ``CompiledLM`` by its older name, imported on first use: it brings
in torch's compiler, which the other commands need not load)."""

from typing import Any

from .beam import Hypothesis, beam_search, gnmt_penalty, greedy_decode
from .cache import CrossKV, DecoderCache, KVCache
from .continuous import ContinuousBatcher, Request
from .generate import (
    Sampling,
    ban_repeated_ngrams,
    filter_top_k,
    filter_top_p,
    generate,
    penalize_repetition,
    scale_temperature,
    stream,
)
from .quantize import QuantizedLMHead, quantize

__all__ = [
    "CompiledLM",
    "CompiledModel",
    "ContinuousBatcher",
    "CrossKV",
    "DecoderCache",
    "Hypothesis",
    "KVCache",
    "QuantizedLMHead",
    "Request",
    "Sampling",
    "ban_repeated_ngrams",
    "beam_search",
    "filter_top_k",
    "filter_top_p",
    "generate",
    "gnmt_penalty",
    "greedy_decode",
    "penalize_repetition",
    "quantize",
    "scale_temperature",
    "stream",
]


def __getattr__(name: str) -> Any:
    if name in ("CompiledLM", "CompiledModel"):
        from . import compiled

        return getattr(compiled, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
