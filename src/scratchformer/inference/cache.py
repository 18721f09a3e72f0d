"""Key/value caches for incremental decoding.

Self-attention keys and values (or what an attention keeps in their place, as its
``cache_shapes`` say) are appended step by step into buffers allocated once for the
longest sequence (no re-concatenation, so a step costs the same at any length);
cross-attention keys and values of the encoder output are computed once per sequence.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..config import max_parameters
from ..nn.attention import CacheShapes
from ..nn.quantized import product_dtype


class KVCache:
    """What one self-attention layer keeps of earlier positions: keys and values, or what
    the attention keeps in their place (its ``cache_shapes``), in ``(batch, heads, max_len,
    width)`` buffers of which the first ``length`` positions are filled (grouped-query
    attention keeps only its shared key/value heads)."""

    def __init__(self, keys: Tensor, values: Tensor, length: int = 0) -> None:
        self.keys, self.values = keys, values
        self.spare: tuple[Tensor, Tensor] | None = None
        self.length = length

    @classmethod
    def empty(
        cls,
        batch: int,
        max_len: int,
        shapes: CacheShapes,
        dtype: torch.dtype = torch.float32,
        device: torch.device | None = None,
    ) -> KVCache:
        """A cache with room for ``max_len`` positions a row, none filled, of keys and
        values of ``shapes`` (``(heads, width)`` each)."""
        (k_heads, k_width), (v_heads, v_width) = shapes
        keys, values = (batch, k_heads, max_len, k_width), (batch, v_heads, max_len, v_width)
        return cls(*cls.buffers(keys, values, dtype=dtype, device=device))

    @staticmethod
    def buffers(
        keys: tuple[int, ...], values: tuple[int, ...], **options: Any
    ) -> tuple[Tensor, Tensor]:
        """Zeroed key and value buffers of these shapes, their length dynamic for
        ``torch.compile`` (one graph for any length) in a process that compiles: one that
        has not loaded the compiler (decoding compiles after loading it) does not load it
        for a hint."""
        pair = torch.zeros(keys, **options), torch.zeros(values, **options)
        if "torch._dynamo" in sys.modules:
            for buffer in pair:
                torch._dynamo.maybe_mark_dynamic(buffer, 2)
        return pair

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new positions' keys and values; return all stored so far."""
        end = self.length + k.shape[2]
        if end > self.keys.shape[2]:
            raise ValueError(f"the cache holds {self.keys.shape[2]} positions; {end} needed")
        self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    @torch.no_grad()  # a copy for decoding: ``out=`` takes no part in autograd
    def reorder(self, index: Tensor) -> None:
        """Row ``i`` becomes a copy of row ``index[i]`` (beam search: the surviving
        hypotheses). Only the filled positions are gathered, into a spare pair of buffers
        that then change places with the first: one pass over the filled positions, where
        gathering in place needs a copy back, which takes longer (docs/lab-notes.md)."""
        if self.spare is None:  # allocated on the first reorder only (beam search)
            self.spare = self.buffers(
                self.keys.shape, self.values.shape, dtype=self.keys.dtype, device=self.keys.device
            )
        filled = slice(0, self.length)
        for source, target in zip((self.keys, self.values), self.spare, strict=True):
            torch.index_select(source[:, :, filled], 0, index, out=target[:, :, filled])
        self.spare, (self.keys, self.values) = (self.keys, self.values), self.spare


class CrossKV:
    """Cross-attention keys and values of the encoder output, computed on first use."""

    def __init__(self) -> None:
        self.kv: tuple[Tensor, Tensor] | None = None

    def get(self, compute: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        if self.kv is None:
            self.kv = compute()
        return self.kv


SPARE = 1
"""Positions a decoding loop keeps past its last step: a step that filled the buffers to
their very end would take a graph of its own under ``torch.compile`` (a slice of a whole
buffer is another case than a slice of part of one)."""


class DecoderCache:
    """The caches of every layer of a decoder stack, for ``batch`` sequences of up to
    ``max_len`` tokens. ``length`` is the number of positions already processed.

    Keys and values are kept in the dtype that attention computes in: the decoder's, or
    autocast's where autocast is on when the cache is made (in bfloat16 autocast, attention
    reads them as bfloat16 anyway, so keeping them so gives the same numbers from half the
    bytes)."""

    def __init__(self, decoder: nn.Module, batch: int, max_len: int) -> None:
        attentions = [layer.self_attn for layer in decoder.layers]
        numbers = batch * max_len * sum(attention.cache_numbers for attention in attentions)
        ceiling = max_parameters()
        if numbers > ceiling:
            raise ValueError(
                f"a decoding cache for {batch} rows (beams or requests) of {max_len} positions "
                f"would hold {numbers:,} numbers, more than the {ceiling:,} this machine's "
                "memory holds: decode fewer at once"
            )
        parameter = next(decoder.parameters())
        dtype = product_dtype(parameter)
        self.self_attn = [
            KVCache.empty(batch, max_len, attention.cache_shapes, dtype, parameter.device)
            for attention in attentions
        ]
        self.cross_attn = [
            CrossKV() if layer.cross_attn is not None else None for layer in decoder.layers
        ]

    @classmethod
    def of(cls, keys: list[Tensor], values: list[Tensor], length: int) -> DecoderCache:
        """The cache of a decoder without cross-attention whose layers hold ``keys`` and
        ``values`` (buffers as :class:`KVCache` keeps them), ``length`` positions filled."""
        cache = cls.__new__(cls)
        cache.self_attn = [KVCache(k, v, length) for k, v in zip(keys, values, strict=True)]
        cache.cross_attn = [None] * len(keys)
        return cache

    @property
    def length(self) -> int:
        return self.self_attn[0].length

    def reorder(self, index: Tensor) -> None:
        """Row ``i`` becomes a copy of row ``index[i]`` in every layer's self-attention
        cache (beam search: the surviving hypotheses). Cross-attention keys and values stay
        as they are: they belong to the rows of the encoder output, which beam search keeps
        once per sentence and never moves a beam away from."""
        for cache in self.self_attn:
            cache.reorder(index)
