"""Checkpoints of other libraries in and out of our own modules."""

from .hf import from_pretrained, save_pretrained
from .hf_config import hf_config, model_config

__all__ = ["from_pretrained", "hf_config", "model_config", "save_pretrained"]
