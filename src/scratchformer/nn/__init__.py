"""Building blocks of the Transformer, each written out."""

from .attention import Attention, MultiHeadAttention, scaled_dot_product_attention
from .dropout import Dropout, dropout
from .embedding import (
    Embedding,
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)
from .feedforward import FeedForward
from .latent_attention import MultiHeadLatentAttention
from .layers import DecoderLayer, EncoderLayer
from .linear import Linear
from .lora import LoRALinear, adapters_disabled
from .loss import linear_cross_entropy
from .masks import causal_mask, combine_masks, padding_mask
from .norm import LayerNorm, RMSNorm, layer_norm, rms_norm
from .positional import PositionalAttention, Positioning, Rotation
from .preference import PreferenceLoss, dpo_loss, sequence_logprobs
from .quantized import QuantizedLinear
from .rotary import RotaryEmbedding

__all__ = [
    "Attention",
    "DecoderLayer",
    "Dropout",
    "Embedding",
    "EncoderLayer",
    "FeedForward",
    "LayerNorm",
    "LearnedPositionalEmbedding",
    "Linear",
    "LoRALinear",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "PositionalAttention",
    "Positioning",
    "PreferenceLoss",
    "QuantizedLinear",
    "RMSNorm",
    "RotaryEmbedding",
    "Rotation",
    "SinusoidalPositionalEncoding",
    "TokenEmbedding",
    "adapters_disabled",
    "causal_mask",
    "combine_masks",
    "dpo_loss",
    "dropout",
    "layer_norm",
    "linear_cross_entropy",
    "padding_mask",
    "rms_norm",
    "scaled_dot_product_attention",
    "sequence_logprobs",
    "sinusoidal_table",
]
