"""A model's parts from its :class:`~scratchformer.config.ModelConfig`: the config's names
are looked up in the registries beside the parts (attention, norms, feed-forward networks,
positional schemes, heads), whose entries each make their part from the whole config and
the part's role (``cross=True`` for cross-attention, ``causal`` for a decoder's positions),
so that a new kind of part, with settings of its own, is its module, its entry and its
config fields, and nothing here changes.

The parts are made in the order of the modules that hold them, which is the order of
their parameters and of the initialisation's random draws (checkpoints and seeded runs
depend on it).
"""

from __future__ import annotations

from functools import partial

from torch import nn

from ..config import ModelConfig
from ..nn import (
    Attention,
    DecoderLayer,
    Dropout,
    Embedding,
    EncoderLayer,
    TokenEmbedding,
)
from ..nn.attention import ATTENTIONS
from ..nn.feedforward import FEED_FORWARDS
from ..nn.norm import NORMS
from ..nn.positional import PositionalAttention
from .heads import HEADS
from .positional import POSITIONALS


def norm(config: ModelConfig) -> nn.Module:
    """The norm that ``config.norm`` names."""
    return NORMS[config.norm](config)


def final_norm(config: ModelConfig) -> nn.Module | None:
    """The norm after a stack's last layer, if the config asks for one."""
    return norm(config) if config.use_final_norm else None


def final_dropout(config: ModelConfig) -> Dropout | None:
    """Dropout on a stack's output, after its final norm, if the config asks for it."""
    return Dropout(config.dropout) if config.final_dropout else None


def attention(config: ModelConfig, cross: bool = False) -> Attention:
    """Self-attention, or cross-attention to the encoder output."""
    return ATTENTIONS[config.attention](config, cross=cross)


def feed_forward(config: ModelConfig) -> nn.Module:
    """The feed-forward network, plain or gated."""
    return FEED_FORWARDS[config.feed_forward](config)


def encoder_layer(config: ModelConfig) -> EncoderLayer:
    """Self-attention and feed-forward, each in a residual connection with its norm."""
    return EncoderLayer(
        attention(config),
        feed_forward(config),
        partial(norm, config),
        dropout=config.dropout,
        norm_first=config.norm_first,
    )


def decoder_layer(config: ModelConfig, cross_attention: bool) -> DecoderLayer:
    """Causal self-attention, cross-attention (if asked) and feed-forward."""
    self_attn, ff = attention(config), feed_forward(config)
    return DecoderLayer(
        self_attn,
        attention(config, cross=True) if cross_attention else None,
        ff,
        partial(norm, config),
        dropout=config.dropout,
        norm_first=config.norm_first,
    )


def embedding(config: ModelConfig, vocab_size: int) -> Embedding:
    """Token (and segment) embeddings with the positions of the config's scheme, if it
    adds any, and BERT's norm if ``config.embedding_norm``."""
    tokens = TokenEmbedding(vocab_size, config.d_model, scale=config.scale_embedding)
    segments = None
    if config.type_vocab_size:
        segments = TokenEmbedding(config.type_vocab_size, config.d_model, scale=False)
    added = POSITIONALS[config.positional].added
    return Embedding(
        tokens,
        None if added is None else added(config),
        segments=segments,
        norm=norm(config) if config.embedding_norm else None,
        dropout=config.dropout,
    )


def positional_attention(config: ModelConfig, causal: bool) -> PositionalAttention | None:
    """What positions a stack's self-attention (``causal`` in a decoder), if the config's
    scheme does."""
    make = POSITIONALS[config.positional].attention
    return None if make is None else make(config, causal)


def head(config: ModelConfig) -> nn.Module | None:
    """The encoder's head that ``config.head`` names, if any."""
    return None if config.head is None else HEADS[config.head](config)
