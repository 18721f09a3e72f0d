"""Positional schemes by name (``ModelConfig.positional``): what each adds to the token
embeddings, and what each hands the self-attention layers of a stack
(:class:`~scratchformer.nn.positional.Positioning`). A new scheme is a module in ``nn/``
and one entry here (its name declared in :mod:`scratchformer.registry`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from torch import nn

from ..config import ModelConfig
from ..nn import LearnedPositionalEmbedding, RotaryEmbedding, SinusoidalPositionalEncoding, init
from ..nn.alibi import ALiBi
from ..nn.positional import PositionalAttention
from ..nn.relative_bias import RelativePositionBias
from ..nn.rotary import RopeScaling
from ..registry import Registry


class PositionalScheme(NamedTuple):
    """How a scheme is built from a config: the module that adds positions to the token
    embeddings, and the one that positions a stack's self-attention, given whether that
    self-attention is causal (a decoder's) or not (either may be ``None``)."""

    added: Callable[[ModelConfig], nn.Module] | None = None
    attention: Callable[[ModelConfig, bool], PositionalAttention] | None = None


def rotary_embedding(config: ModelConfig, causal: bool) -> RotaryEmbedding:
    """The rotary embedding of a stack's heads (of their rotated part, ``config.rotary_dim``),
    its frequencies scaled if the config says (the same in a causal stack)."""
    scaling = None
    if config.rope_scaling is not None:
        scaling = RopeScaling(
            config.rope_scaling,
            config.rope_factor,
            config.rope_low_freq_factor,
            config.rope_high_freq_factor,
            config.rope_original_max_len,
        )
    return RotaryEmbedding(config.rotary_dim, config.rope_theta, scaling)


def relative_bias(config: ModelConfig, causal: bool) -> RelativePositionBias:
    """T5's bucketed relative bias of a stack, bidirectional unless causal, drawn as T5
    initialises it (normal, std ``d_model^-0.5``)."""
    bias = RelativePositionBias(
        config.n_heads, config.relative_buckets, config.relative_max_distance, not causal
    )
    init.normal_(bias.weight, std=config.d_model**-0.5)
    return bias


POSITIONALS: Registry[PositionalScheme] = Registry("positional")
POSITIONALS.add(
    "sinusoidal", PositionalScheme(added=lambda c: SinusoidalPositionalEncoding(c.d_model))
)
POSITIONALS.add(
    "learned", PositionalScheme(added=lambda c: LearnedPositionalEmbedding(c.d_model, c.max_len))
)
POSITIONALS.add("rotary", PositionalScheme(attention=rotary_embedding))
POSITIONALS.add("alibi", PositionalScheme(attention=lambda c, causal: ALiBi(c.n_heads)))
POSITIONALS.add("relative", PositionalScheme(attention=relative_bias))
