"""scratchformer: a Transformer toolkit written from scratch in PyTorch."""

from .config import ModelConfig
from .interop import from_pretrained, save_pretrained
from .models import (
    DecoderLM,
    EncoderModel,
    ModelOutput,
    Transformer,
    build_model,
    count_parameters,
)

__version__ = "0.1.0"

__all__ = [
    "DecoderLM",
    "EncoderModel",
    "ModelConfig",
    "ModelOutput",
    "Transformer",
    "__version__",
    "build_model",
    "count_parameters",
    "from_pretrained",
    "save_pretrained",
]
