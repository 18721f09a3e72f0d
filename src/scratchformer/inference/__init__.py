"""Decoding: key/value caches, the decoding engine and generation, beam search, the kernels
they install (``kernels``), int8 weights (``quantize``), and compiled decoding
(``CompiledModel``, or ``CompiledLM`` by its older name, imported on first use: it brings
in torch's compiler, which the other commands need not load)."""

from typing import Any

from .beam import Hypothesis, beam_search, gnmt_penalty, greedy_decode
from .cache import CrossKV, DecoderCache, KVCache
from .engine import Engine, Request
from .generate import generate, stream
from .quantize import QuantizedLMHead, quantize
from .sampling import (
    Sampling,
    TokenLogprob,
    ban_repeated_ngrams,
    filter_top_k,
    filter_top_p,
    penalize_repetition,
    scale_temperature,
)

__all__ = [
    "CompiledLM",
    "CompiledModel",
    "CrossKV",
    "DecoderCache",
    "Engine",
    "Hypothesis",
    "KVCache",
    "QuantizedLMHead",
    "Request",
    "Sampling",
    "TokenLogprob",
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
