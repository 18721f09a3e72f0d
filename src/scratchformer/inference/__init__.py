"""Decoding: key/value caches, generation, beam search."""

from .beam import Hypothesis, beam_search, gnmt_penalty, greedy_decode
from .cache import CrossKV, DecoderCache, KVCache
from .compiled import CompiledLM
from .generate import (
    ban_repeated_ngrams,
    filter_top_k,
    filter_top_p,
    generate,
    penalize_repetition,
    scale_temperature,
    stream,
)

__all__ = [
    "CompiledLM",
    "CrossKV",
    "DecoderCache",
    "Hypothesis",
    "KVCache",
    "ban_repeated_ngrams",
    "beam_search",
    "filter_top_k",
    "filter_top_p",
    "generate",
    "gnmt_penalty",
    "greedy_decode",
    "penalize_repetition",
    "scale_temperature",
    "stream",
]
