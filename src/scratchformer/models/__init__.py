"""The three architectures and their heads.

Each model class is named after its ``arch``: :class:`EncoderModel`, :class:`DecoderModel`,
:class:`Seq2SeqModel`.
"""

from __future__ import annotations

from torch import nn

from ..config import ModelConfig
from .base import ModelOutput, count_parameters
from .decoder import Decoder, DecoderModel
from .encoder import Encoder, EncoderModel
from .heads import LMHead, Pooler, SequenceHead, TokenClassificationHead, pool
from .seq2seq import Seq2SeqModel

MODELS: dict[str, type[nn.Module]] = {
    "encoder": EncoderModel,
    "decoder": DecoderModel,
    "seq2seq": Seq2SeqModel,
}


def build_model(config: ModelConfig) -> nn.Module:
    """The model that ``config.arch`` names, freshly initialised."""
    return MODELS[config.arch](config)


__all__ = [
    "MODELS",
    "Decoder",
    "DecoderModel",
    "Encoder",
    "EncoderModel",
    "LMHead",
    "ModelOutput",
    "Pooler",
    "Seq2SeqModel",
    "SequenceHead",
    "TokenClassificationHead",
    "build_model",
    "count_parameters",
    "pool",
]
