"""The three architectures and their heads.

Each model class is named after its ``arch``: :class:`EncoderModel`, :class:`DecoderModel`,
:class:`Seq2SeqModel`.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ..config import ModelConfig
from ..registry import Registry
from .base import ModelOutput, count_parameters
from .decoder import Decoder, DecoderModel
from .electra import ReplacedTokenHead
from .encoder import Encoder, EncoderModel
from .heads import HEADS, LMHead, Pooler, SequenceHead, TokenClassificationHead, pool
from .positional import POSITIONALS
from .seq2seq import Seq2SeqModel

MODELS: Registry[Callable[[ModelConfig], nn.Module]] = Registry("arch")
"""``ModelConfig.arch`` -> the model class."""
MODELS.add("encoder", EncoderModel)
MODELS.add("decoder", DecoderModel)
MODELS.add("seq2seq", Seq2SeqModel)


def build_model(config: ModelConfig) -> nn.Module:
    """The model that ``config.arch`` names, freshly initialised."""
    return MODELS[config.arch](config)


__all__ = [
    "HEADS",
    "MODELS",
    "POSITIONALS",
    "Decoder",
    "DecoderModel",
    "Encoder",
    "EncoderModel",
    "LMHead",
    "ModelOutput",
    "Pooler",
    "ReplacedTokenHead",
    "Seq2SeqModel",
    "SequenceHead",
    "TokenClassificationHead",
    "build_model",
    "count_parameters",
    "pool",
]
