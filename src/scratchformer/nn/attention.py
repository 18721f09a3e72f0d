"""Scaled dot-product attention and multi-head attention (paper sec. 3.2)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import Registry
from .dropout import dropout
from .linear import Linear
from .masks import causal_mask, combine_masks
from .packing import Packing
from .positional import Rotation

if TYPE_CHECKING:
    from ..config import ModelConfig


CacheShapes = tuple[tuple[int, int], tuple[int, int]]
"""``(heads, width)`` of the keys and of the values that a self-attention cache keeps for
every position (or of what it keeps in their place)."""


class SelfAttentionCache(Protocol):
    """Where self-attention keeps the keys and values of earlier positions (or what an
    attention keeps in their place: :attr:`Attention.cache_shapes`)."""

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new positions' keys and values; return those of all positions."""
        ...


class CrossAttentionCache(Protocol):
    """Where cross-attention keeps the keys and values of the encoder output."""

    def get(self, compute: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """The stored keys and values, computed by ``compute`` on first use."""
        ...


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax of ``scores`` ``(..., q_len, k_len)`` over the keys that ``mask`` (True = may
    attend) allows; a query with no key allowed gets all-zero weights, never NaN."""
    if mask is None:
        return scores.softmax(dim=-1)
    has_key = mask.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~has_key, 0.0)
    return scores.softmax(dim=-1).masked_fill(~has_key, 0.0)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    bias: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """``softmax(q k^T * scale + bias) v``, written out; returns ``(output, weights)``.
    ``scale`` is ``1 / sqrt(d_k)`` unless given (T5's is 1: it folds the factor into the
    initialisation of the query weights).

    ``q``: ``(..., q_len, d_k)``, ``k``: ``(..., k_len, d_k)``, ``v``: ``(..., k_len, d_v)``;
    ``mask`` (True = may attend) and the additive score ``bias`` (a positional scheme's,
    e.g. ALiBi) broadcast to ``(..., q_len, k_len)``. A query with nothing to attend to
    gets all-zero weights and a zero output, never NaN. The weights returned are those
    before dropout, so each row sums to one (or zero).
    """
    scores = q @ k.transpose(-2, -1)
    scores = scores / math.sqrt(q.shape[-1]) if scale is None else scores * scale
    if bias is not None:
        scores = scores + bias
    weights = masked_softmax(scores, mask)
    return dropout(weights, dropout_p) @ v, weights


def expand_kv_heads(k: Tensor, v: Tensor, n_heads: int) -> tuple[Tensor, Tensor]:
    """Keys and values of fewer heads than ``n_heads`` queries (grouped-query attention),
    each head repeated for its group of consecutive query heads."""
    groups = n_heads // k.shape[1]
    if groups == 1:
        return k, v
    return k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)


def score_mask(bias: Tensor, mask: Tensor | None, dtype: torch.dtype) -> Tensor:
    """The float ``attn_mask`` of PyTorch's fused attention that adds ``bias`` to the scores
    and excludes the keys ``mask`` forbids (-inf); its CPU kernel gives a query whose
    every key is -inf a zero output, as a boolean mask does."""
    bias = bias.to(dtype)
    return bias if mask is None else bias.masked_fill(~mask, float("-inf"))


class Attention(nn.Module, ABC):
    """What every attention of :data:`ATTENTIONS` is: ``forward`` = :meth:`project` the input
    to the heads' queries, keys and values -> :meth:`attend` -> merge the heads ->
    ``out_proj``; a cached decoder can call the steps itself (project new tokens once, keep
    what the cache keeps).

    A variant is a subclass, registered by its :meth:`from_config`: it makes its
    projections (``out_proj`` among them) in ``__init__`` and writes :meth:`project`, which
    decides what a decoding cache keeps (:attr:`cache_shapes`); LoRA adapts the parts of
    its fused projections apart (:attr:`fused_parts`). It may write an :meth:`attend` of
    its own too; decoding's kernels, which compute this class's formula, then leave it
    alone, unless the class says they fit (:attr:`attend_is_core`).

    When weights are not requested, :meth:`attend` runs PyTorch's fused
    ``scaled_dot_product_attention``, which gives the same numbers as the written-out one;
    except when training with attention dropout on the CPU, where the fused kernel falls
    back to unfused steps with a costlier dropout than :func:`~.dropout.dropout`.
    """

    attend_is_core: ClassVar[bool] = False
    """Whether the class's own :meth:`attend` computes what this class's does (in another
    way), so that decoding's kernels may stand in for it."""
    out_proj: nn.Module

    def __init__(self, n_heads: int, dropout: float = 0.0, scale: float | None = None) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.scale = scale

    @classmethod
    @abstractmethod
    def from_config(cls, config: ModelConfig, *, cross: bool = False) -> Attention:
        """The self-attention (or, with ``cross``, the cross-attention) of a model."""

    @property
    @abstractmethod
    def cache_shapes(self) -> CacheShapes:
        """``(heads, width)`` of each of the two tensors that self-attention keeps in a
        cache for every position (:meth:`project` appends them): its keys and values, or
        what it keeps in their place."""

    @property
    def cache_numbers(self) -> int:
        """The numbers a position costs in a self-attention cache of this layer."""
        return sum(heads * width for heads, width in self.cache_shapes)

    @property
    def fused_parts(self) -> dict[str, tuple[int, ...]]:
        """The linear maps (by attribute name) whose outputs are several maps' side by
        side, and the widths of those parts, which LoRA adapts apart; none by default."""
        return {}

    def forward(
        self,
        x: Tensor,
        source: Tensor | None = None,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: SelfAttentionCache | CrossAttentionCache | None = None,
        packing: Packing | None = None,
        rotation: Rotation | None = None,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``x``: ``(batch, q_len, d_model)``; ``source``: the encoder output for
        cross-attention. ``is_causal`` adds a causal mask to ``mask`` (aligned to the last
        keys when a cache makes keys outnumber queries). With ``packing``, ``x`` and the
        output are the packed real tokens ``(tokens, d_model)`` of a padded batch. A
        ``rotation`` (rotary embeddings) turns the new queries and keys of self-attention by
        their positions; ``bias`` ``(batch or 1, heads, q_len, k_len)`` is added to the
        scores (ALiBi). Returns the output and, if ``need_weights``, the per-head weights
        ``(batch, heads, q_len, k_len)``."""
        q, k, v = self.project(x, source, cache, packing, rotation)
        out, weights = self.attend(q, k, v, mask, is_causal, need_weights, bias)
        out = self.merge_heads(out)
        return self.out_proj(out if packing is None else packing.pack(out)), weights

    @abstractmethod
    def project(
        self,
        x: Tensor,
        source: Tensor | None = None,
        cache: SelfAttentionCache | CrossAttentionCache | None = None,
        packing: Packing | None = None,
        rotation: Rotation | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``(batch, heads, len, d)``, keys ``(batch, kv_heads, len, d)`` and values
        ``(batch, kv_heads, len, d_v)`` of ``x`` (and of the ``source``, for
        cross-attention), those of a cache's earlier positions included; ``packing``,
        ``rotation``: as :meth:`forward` takes them."""

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(batch, heads, len, d_v)`` -> ``(batch, len, heads * d_v)``."""
        return x.transpose(1, 2).flatten(2)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of all heads, ``bias`` added to the scores: written out when weights
        are wanted or when dropping attention weights on the CPU, else PyTorch's fused
        kernel, the bias and the mask then one float mask (:func:`score_mask`). Shared
        key/value heads are repeated for their group of query heads (:func:`expand_kv_heads`).

        This is the core. Decoding may give an instance an ``attend`` of its own, an
        instance attribute that shadows this method while it is installed (query rows that
        share keys, fused sums for a few queries: ``scratchformer.inference.kernels``)."""
        k, v = expand_kv_heads(k, v, q.shape[1])
        dropout_p = self.dropout if self.training else 0.0
        q_len, k_len = q.shape[-2], k.shape[-2]
        written_out = need_weights or (dropout_p > 0 and q.device.type == "cpu")
        is_causal = is_causal and q_len > 1  # one query, the last position, sees every key
        if is_causal and (written_out or mask is not None or bias is not None or q_len != k_len):
            mask = combine_masks(mask, causal_mask(q_len, k_len, device=q.device))
            is_causal = False
        if written_out:
            return scaled_dot_product_attention(q, k, v, mask, dropout_p, bias, self.scale)
        attn_mask = mask if bias is None else score_mask(bias, mask, q.dtype)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=self.scale
        )
        return out, None


class MultiHeadAttention(Attention):
    """Multi-head attention for self-attention (one fused QKV projection) or cross-attention
    (a query projection for the decoder and a fused key/value projection for the encoder
    output), followed by the output projection.

    With ``n_kv_heads`` below ``n_heads``, keys and values have fewer heads, each shared by
    a group of ``n_heads / n_kv_heads`` consecutive query heads (grouped-query attention;
    multi-query with one); a cache then keeps only those. ``qkv_bias`` (default: ``bias``)
    sets the biases of the query, key and value projections apart from the output's.
    ``scale`` multiplies the scores (default: ``1 / sqrt(d_head)``; T5's is 1).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        cross: bool = False,
        n_kv_heads: int | None = None,
        qkv_bias: bool | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__(n_heads, dropout, scale)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if n_kv_heads < 1 or n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")
        self.n_kv_heads = n_kv_heads
        self.d_head = d_model // n_heads
        self.cross = cross
        qkv_bias = bias if qkv_bias is None else qkv_bias
        kv_width = n_kv_heads * self.d_head
        if cross:
            self.q_proj = Linear(d_model, d_model, bias=qkv_bias)
            self.kv_proj = Linear(d_model, 2 * kv_width, bias=qkv_bias)
        else:
            self.qkv_proj = Linear(d_model, d_model + 2 * kv_width, bias=qkv_bias)
        self.out_proj = Linear(d_model, d_model, bias=bias)

    @classmethod
    def from_config(cls, config: ModelConfig, *, cross: bool = False) -> MultiHeadAttention:
        """The self-attention (or, with ``cross``, the cross-attention) of a model."""
        return cls(
            config.d_model,
            config.n_heads,
            config.attention_dropout,
            config.bias,
            cross=cross,
            n_kv_heads=config.n_kv_heads,
            qkv_bias=config.qkv_bias,
            scale=None if config.scale_attention else 1.0,
        )

    @property
    def cache_shapes(self) -> CacheShapes:
        """Keys and values of the key/value heads."""
        return (self.n_kv_heads, self.d_head), (self.n_kv_heads, self.d_head)

    @property
    def fused_parts(self) -> dict[str, tuple[int, ...]]:
        """Query, key and value of ``qkv_proj``; key and value of ``kv_proj``."""
        kv = self.n_kv_heads * self.d_head
        if self.cross:
            return {"kv_proj": (kv, kv)}
        return {"qkv_proj": (self.n_heads * self.d_head, kv, kv)}

    def project(
        self,
        x: Tensor,
        source: Tensor | None = None,
        cache: SelfAttentionCache | CrossAttentionCache | None = None,
        packing: Packing | None = None,
        rotation: Rotation | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``(batch, heads, len, d_head)``, keys and values ``(batch, kv_heads, len,
        d_head)``. With a cache,
        self-attention appends the new keys and values to it (rotated, with a ``rotation``)
        and attends to all of them; cross-attention projects the source once and reuses it.
        Self-attention projects packed tokens (``packing``) before unpacking them."""
        if self.cross:
            if packing is not None or rotation is not None:
                raise ValueError("cross-attention takes no packed tokens and no rotation")
            (q,) = self.split_heads(self.q_proj(x), self.n_heads)
            if cache is not None:
                return q, *cache.get(lambda: self.project_kv(self._source(source)))  # type: ignore[union-attr]
            return q, *self.project_kv(self._source(source))
        if source is not None:
            raise ValueError("self-attention takes no source; build with cross=True")
        qkv = self.qkv_proj(x)
        heads = (self.n_heads, self.n_kv_heads, self.n_kv_heads)
        q, k, v = self.split_heads(qkv if packing is None else packing.unpack(qkv), *heads)
        if rotation is not None:
            q, k = rotation.apply(q), rotation.apply(k)
        if cache is not None:
            k, v = cache.append(k, v)  # type: ignore[union-attr]
        return q, k, v

    @staticmethod
    def _source(source: Tensor | None) -> Tensor:
        if source is None:
            raise ValueError("cross-attention needs a source (the encoder output)")
        return source

    def project_kv(self, source: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention keys and values of the encoder output (computed once per sequence
        when decoding with a cache)."""
        k, v = self.split_heads(self.kv_proj(source), self.n_kv_heads, self.n_kv_heads)
        return k, v

    def split_heads(self, x: Tensor, *heads: int) -> tuple[Tensor, ...]:
        """``(batch, len, sum(heads) * d_head)`` -> one ``(batch, h, len, d_head)`` per ``h``
        of ``heads`` (the parts lie side by side in the last dimension)."""
        batch, length, _ = x.shape
        x = x.view(batch, length, sum(heads), self.d_head).transpose(1, 2)
        return x.split(heads, dim=1)


ATTENTIONS: Registry[Callable[..., Attention]] = Registry("attention")
"""``ModelConfig.attention`` -> the attention of a config: ``(config, cross=False)``."""
ATTENTIONS.add("multi_head", MultiHeadAttention.from_config)
