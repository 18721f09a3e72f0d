"""What every model shares: its output type, weight initialisation, parameter count."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..nn import Embedding, LayerNorm, RotaryEmbedding, Rotation
from ..nn.attention import CrossAttentionCache, SelfAttentionCache
from ..nn.norm import centred_norm
from ..nn.rotary import RopeScaling
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


def lm_output(
    head: LMHead,
    hidden: Tensor,
    attentions: dict[str, list[Tensor]] | None,
    labels: Tensor | None,
    label_smoothing: float,
) -> ModelOutput:
    """A language model's output: the logits of ``hidden``; or, given ``labels``, their
    mean cross-entropy, computed without forming the logits (which are then ``None``)."""
    if labels is None:
        return ModelOutput(head(hidden), hidden, attentions)
    return ModelOutput(None, hidden, attentions, loss=head.loss(hidden, labels, label_smoothing))


def layer_kwargs(config: ModelConfig) -> dict[str, Any]:
    """The keyword arguments an encoder or decoder layer takes from a config."""
    return {
        "d_model": config.d_model,
        "n_heads": config.n_heads,
        "d_ff": config.d_ff,
        "dropout": config.dropout,
        "attention_dropout": config.attention_dropout,
        "activation": config.activation,
        "norm_first": config.norm_first,
        "eps": config.layer_norm_eps,
        "bias": config.bias,
        "n_kv_heads": config.n_kv_heads,
        "qkv_bias": config.qkv_bias,
        "gated": config.gated,
        "norm": config.norm,
    }


def embedding_for(config: ModelConfig, vocab_size: int) -> Embedding:
    return Embedding(
        vocab_size,
        config.d_model,
        max_len=config.max_len,
        dropout=config.dropout,
        positional=config.positional,
        scale=config.scale_embedding,
        n_segments=config.type_vocab_size,
        norm=norm_for(config) if config.embedding_norm else None,
    )


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


def rotary_for(config: ModelConfig) -> RotaryEmbedding | None:
    """The rotary embedding of a stack's self-attention, if the config asks for one."""
    if config.positional != "rotary":
        return None
    scaling = None
    if config.rope_scaling is not None:
        scaling = RopeScaling(
            config.rope_scaling,
            config.rope_factor,
            config.rope_low_freq_factor,
            config.rope_high_freq_factor,
            config.rope_original_max_len,
        )
    return RotaryEmbedding(config.d_model // config.n_heads, config.rope_theta, scaling)


def rotation_for(
    rotary: RotaryEmbedding | None,
    x: Tensor,
    cache: DecoderCache | None = None,
    positions: Tensor | None = None,
) -> Rotation | None:
    """The rotation of the positions of ``x`` ``(batch, seq, ...)``: the given ids, else
    counting on from the cache's length (from 0 without a cache); ``None`` without rotary."""
    if rotary is None:
        return None
    positions = cache_positions(x, cache, positions)
    return rotary(torch.arange(x.shape[1], device=x.device) if positions is None else positions)


def norm_for(config: ModelConfig) -> LayerNorm:
    """A LayerNorm (or RMSNorm) of the config's width, eps and bias."""
    return LayerNorm(config.d_model, config.layer_norm_eps, config.bias, centred_norm(config.norm))


def final_norm(config: ModelConfig) -> LayerNorm | None:
    """The norm after a stack's last layer, if the config asks for one."""
    return norm_for(config) if config.use_final_norm else None


def init_linear_weights(model: nn.Module) -> None:
    """Xavier-uniform linear weights and zero biases, as in the reference implementations
    of the paper; embeddings and norms keep the initialisation of their own modules."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters; a tied weight is counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
