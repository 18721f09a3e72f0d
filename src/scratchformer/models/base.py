"""What every model shares: its output type, weight initialisation, parameter count."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..nn.attention import CrossAttentionCache, MultiHeadAttention, SelfAttentionCache
from ..nn.positional import PositionalAttention, Positioning
from .heads import LMHead


@dataclass
class ModelOutput:
    """``logits``: the head's output (``None`` for a bare encoder); ``last_hidden_state``:
    ``(batch, seq, d_model)`` of the last stack; ``attentions``: when requested, per kind
    (``encoder``, ``decoder``, ``cross``) one ``(batch, heads, q_len, k_len)`` tensor a layer;
    ``pooler_output``: ``(batch, d_model)`` of an encoder with a pooler (BERT); ``loss``:
    the mean cross-entropy against the ``labels`` given to a language model's forward
    (which then forms no logits).
    """

    logits: Tensor | None
    last_hidden_state: Tensor
    attentions: dict[str, list[Tensor]] | None = None
    pooler_output: Tensor | None = None
    loss: Tensor | None = None


def output_scale(config: ModelConfig) -> float:
    """What a language model multiplies its last hidden states by before the LM head:
    ``d_model^-0.5`` with ``scale_output`` (T5's head tied to embeddings of unit variance),
    else 1. (The head stays a plain linear map, for decoding kernels and quantization.)"""
    return config.d_model**-0.5 if config.scale_output else 1.0


def head_input(hidden: Tensor, scale: float) -> Tensor:
    """``hidden`` times the :func:`output_scale` ``scale``."""
    return hidden if scale == 1.0 else hidden * scale


def lm_output(
    head: LMHead,
    hidden: Tensor,
    attentions: dict[str, list[Tensor]] | None,
    labels: Tensor | None,
    label_smoothing: float,
    scale: float = 1.0,
) -> ModelOutput:
    """A language model's output: the logits of ``hidden`` (times ``scale``, see
    :func:`output_scale`); or, given ``labels``, their mean cross-entropy, computed without
    forming the logits (which are then ``None``)."""
    x = head_input(hidden, scale)
    if labels is None:
        return ModelOutput(head(x), hidden, attentions)
    return ModelOutput(None, hidden, attentions, loss=head.loss(x, labels, label_smoothing))


class DecoderCache(Protocol):
    """What a decoder stack needs of a cache (``scratchformer.inference.DecoderCache``):
    per layer a self-attention cache and a cross-attention cache (or ``None``)."""

    self_attn: Sequence[SelfAttentionCache]
    cross_attn: Sequence[CrossAttentionCache | None]

    @property
    def length(self) -> int:
        """Positions processed so far."""
        ...


def cache_positions(
    ids: Tensor, cache: DecoderCache | None, positions: Tensor | None
) -> Tensor | None:
    """Position ids of new tokens: the given ones, else counting on from the cache."""
    if positions is not None or cache is None:
        return positions
    return torch.arange(cache.length, cache.length + ids.shape[1], device=ids.device)


def positioning_for(
    scheme: PositionalAttention | None,
    x: Tensor,
    cache: DecoderCache | None = None,
    positions: Tensor | None = None,
) -> Positioning | None:
    """How ``scheme`` positions the self-attention of ``x`` ``(batch, seq, ...)``: at the
    given position ids, else counting on from the cache's length (from 0 without a cache),
    attending to the cache's keys and its own; ``None`` without a scheme."""
    if scheme is None:
        return None
    positions = cache_positions(x, cache, positions)
    if positions is None:
        positions = torch.arange(x.shape[1], device=x.device)
    k_len = x.shape[1] if cache is None else cache.length + x.shape[1]
    return scheme.positioning(positions, k_len)


def init_linear_weights(model: nn.Module) -> None:
    """Xavier-uniform linear weights and zero biases, as in the reference implementations
    of the paper; embeddings and norms keep the initialisation of their own modules. An
    attention that scales its scores otherwise than by ``1 / sqrt(d_head)`` (T5's, by 1)
    has the difference folded into its query weights, as T5 initialises them, so that its
    first scores are those of the paper's."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    for module in model.modules():
        if isinstance(module, MultiHeadAttention) and module.scale is not None:
            query = module.q_proj if module.cross else module.qkv_proj
            rows = module.n_heads * module.d_head
            with torch.no_grad():
                query.weight[:rows] *= module.d_head**-0.5 / module.scale


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters; a tied weight is counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
