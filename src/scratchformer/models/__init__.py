"""The three architectures and their heads."""

from __future__ import annotations

from torch import nn

from ..config import ModelConfig
from .base import ModelOutput, count_parameters
from .decoder import Decoder, DecoderLM
from .encoder import Encoder, EncoderModel
from .heads import LMHead, Pooler, SequenceHead, TokenClassificationHead, pool
from .seq2seq import Transformer

MODELS: dict[str, type[nn.Module]] = {
    "encoder": EncoderModel,
    "decoder": DecoderLM,
    "seq2seq": Transformer,
}


def build_model(config: ModelConfig) -> nn.Module:
    """The model that ``config.arch`` names, freshly initialised."""
    return MODELS[config.arch](config)


__all__ = [
    "MODELS",
    "Decoder",
    "DecoderLM",
    "Encoder",
    "EncoderModel",
    "LMHead",
    "ModelOutput",
    "Pooler",
    "SequenceHead",
    "TokenClassificationHead",
    "Transformer",
    "build_model",
    "count_parameters",
    "pool",
]
