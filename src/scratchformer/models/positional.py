"""Positional schemes by name (``ModelConfig.positional``): what each adds to the token
embeddings, and what each hands the self-attention layers of a stack
(:class:`~scratchformer.nn.positional.Positioning`). A new scheme is a module in ``nn/``
and one entry here (its name declared in :mod:`scratchformer.registry`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from torch import nn

from ..config import ModelConfig
from ..nn import LearnedPositionalEmbedding, RotaryEmbedding, SinusoidalPositionalEncoding
from ..nn.alibi import ALiBi
from ..nn.positional import PositionalAttention
from ..nn.rotary import RopeScaling
from ..registry import Registry


class PositionalScheme(NamedTuple):
    """How a scheme is built from a config: the module that adds positions to the token
    embeddings, and the one that positions a stack's self-attention (either may be
    ``None``)."""

    added: Callable[[ModelConfig], nn.Module] | None = None
    attention: Callable[[ModelConfig], PositionalAttention] | None = None


def rotary_embedding(config: ModelConfig) -> RotaryEmbedding:
    """The rotary embedding of a stack's heads, its frequencies scaled if the config says."""
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


POSITIONALS: Registry[PositionalScheme] = Registry("positional")
POSITIONALS.add(
    "sinusoidal", PositionalScheme(added=lambda c: SinusoidalPositionalEncoding(c.d_model))
)
POSITIONALS.add(
    "learned", PositionalScheme(added=lambda c: LearnedPositionalEmbedding(c.d_model, c.max_len))
)
POSITIONALS.add("rotary", PositionalScheme(attention=rotary_embedding))
POSITIONALS.add("alibi", PositionalScheme(attention=lambda c: ALiBi(c.n_heads)))
