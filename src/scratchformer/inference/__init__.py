"""Decoding: key/value caches, generation, beam search."""

from .cache import CrossKV, DecoderCache, KVCache

__all__ = ["CrossKV", "DecoderCache", "KVCache"]
