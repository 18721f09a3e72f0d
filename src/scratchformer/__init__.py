"""scratchformer: a Transformer toolkit written from scratch in PyTorch.

``DecoderLM`` and ``Transformer`` are the old names of :class:`DecoderModel` and
:class:`Seq2SeqModel`, kept as aliases.
"""

from .config import ModelConfig
from .interop import from_pretrained, save_pretrained
from .models import (
    DecoderLM,
    DecoderModel,
    EncoderModel,
    ModelOutput,
    Seq2SeqModel,
    Transformer,
    build_model,
    count_parameters,
)
from .version import __version__

__all__ = [
    "DecoderLM",
    "DecoderModel",
    "EncoderModel",
    "ModelConfig",
    "ModelOutput",
    "Seq2SeqModel",
    "Transformer",
    "__version__",
    "build_model",
    "count_parameters",
    "from_pretrained",
    "save_pretrained",
]
