"""scratchformer: a Transformer toolkit written from scratch in PyTorch."""

from .config import ModelConfig
from .interop import from_pretrained, save_pretrained
from .models import (
    DecoderModel,
    EncoderModel,
    ModelOutput,
    Seq2SeqModel,
    build_model,
    count_parameters,
)
from .version import __version__

__all__ = [
    "DecoderModel",
    "EncoderModel",
    "ModelConfig",
    "ModelOutput",
    "Seq2SeqModel",
    "__version__",
    "build_model",
    "count_parameters",
    "from_pretrained",
    "save_pretrained",
]
