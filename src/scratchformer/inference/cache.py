"""Key/value caches for incremental decoding.

Self-attention keys and values are appended step by step into buffers allocated once for
the longest sequence (no re-concatenation, so a step costs the same at any length);
cross-attention keys and values of the encoder output are computed once per sequence.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn


class KVCache:
    """Keys and values of one self-attention layer: ``(batch, kv_heads, max_len, d_head)``
    buffers of which the first ``length`` positions are filled (grouped-query attention
    keeps only its shared key/value heads)."""

    def __init__(
        self,
        batch: int,
        n_heads: int,
        d_head: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | None = None,
    ) -> None:
        self.keys = torch.zeros(batch, n_heads, max_len, d_head, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.length = 0
        for buffer in (self.keys, self.values):  # for torch.compile: one graph for any length
            torch._dynamo.maybe_mark_dynamic(buffer, 2)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new positions' keys and values; return all stored so far."""
        end = self.length + k.shape[2]
        if end > self.keys.shape[2]:
            raise ValueError(f"the cache holds {self.keys.shape[2]} positions; {end} needed")
        self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def reorder(self, index: Tensor) -> None:
        """Row ``i`` becomes a copy of row ``index[i]`` (beam search: the surviving
        hypotheses). In place, and only the filled positions: the buffers keep their shape."""
        for buffer in (self.keys, self.values):
            buffer[:, :, : self.length] = buffer[index, :, : self.length]


class CrossKV:
    """Cross-attention keys and values of the encoder output, computed on first use."""

    def __init__(self) -> None:
        self.kv: tuple[Tensor, Tensor] | None = None

    def get(self, compute: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        if self.kv is None:
            self.kv = compute()
        return self.kv

    def reorder(self, index: Tensor) -> None:
        if self.kv is not None:
            self.kv = (self.kv[0].index_select(0, index), self.kv[1].index_select(0, index))


class DecoderCache:
    """The caches of every layer of a decoder stack, for ``batch`` sequences of up to
    ``max_len`` tokens. ``length`` is the number of positions already processed."""

    def __init__(self, decoder: nn.Module, batch: int, max_len: int) -> None:
        first = decoder.layers[0].self_attn
        parameter = next(decoder.parameters())
        self.self_attn = [
            KVCache(
                batch, first.n_kv_heads, first.d_head, max_len, parameter.dtype, parameter.device
            )
            for _ in decoder.layers
        ]
        self.cross_attn = [
            CrossKV() if layer.cross_attn is not None else None for layer in decoder.layers
        ]

    @property
    def length(self) -> int:
        return self.self_attn[0].length

    def reorder(self, index: Tensor, cross_attention: bool = True) -> None:
        """Row ``i`` becomes a copy of row ``index[i]`` in every layer; with
        ``cross_attention=False`` only in the self-attention caches (beam search, whose rows
        of one sentence share the cross-attention keys and values)."""
        caches = [*self.self_attn, *(self.cross_attn if cross_attention else [])]
        for cache in caches:
            if cache is not None:
                cache.reorder(index)
