"""scratchformer: a Transformer toolkit written from scratch in PyTorch.

The names below are imported when first used (PEP 562), so that importing the package, or
its command line, loads no torch until a command needs it.
"""

from __future__ import annotations

import importlib
from typing import Any

from .version import __version__ as __version__

EXPORTS = {
    "DecoderModel": "models",
    "EncoderModel": "models",
    "ModelConfig": "config",
    "ModelOutput": "models",
    "Seq2SeqModel": "models",
    "build_model": "models",
    "count_parameters": "models",
    "from_pretrained": "interop.hf",
    "save_pretrained": "interop.hf",
}
"""Each name the package exports, and the subpackage or module that defines it."""

__all__ = sorted([*EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    if name not in EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{EXPORTS[name]}", __name__), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
