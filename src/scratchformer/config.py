"""Dataclass configurations: validated on construction, JSON round trip.

Every invalid value raises ``ValueError`` naming the field, e.g.
``d_model=300 is not divisible by n_heads=8``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .nn.feedforward import ACTIVATIONS

ARCHITECTURES = ("encoder", "decoder", "seq2seq")
POSITIONALS = ("sinusoidal", "learned")
HEADS = ("classification", "regression", "token_classification")
POOLINGS = ("mean", "first")

C = TypeVar("C", bound="ConfigBase")


class ConfigBase:
    """Shared behaviour of the config dataclasses: dict / JSON round trip."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], values: dict[str, Any]) -> C:
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}")
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls: type[C], text: str) -> C:
        return cls.from_dict(json.loads(text))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls: type[C], path: str | Path) -> C:
        return cls.from_json(Path(path).read_text(encoding="utf-8"))


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _positive(config: object, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        _require(
            isinstance(value, int) and not isinstance(value, bool) and value > 0,
            f"{name}={value!r} must be a positive integer",
        )


def _one_of(config: object, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(config, name)
    _require(value in choices, f"{name}={value!r} must be one of {', '.join(choices)}")


@dataclass
class ModelConfig(ConfigBase):
    """One config for the three architectures.

    ``arch`` picks the family: ``encoder`` (encoder + optional task head), ``decoder``
    (GPT-style causal language model) or ``seq2seq`` (the encoder-decoder Transformer of
    "Attention Is All You Need"). The defaults are the paper's base model.
    """

    arch: str = "seq2seq"
    vocab_size: int = 32000
    """Vocabulary size; the source vocabulary for ``seq2seq``."""
    tgt_vocab_size: int | None = None
    """Target vocabulary of ``seq2seq``; ``None`` means the same as ``vocab_size``."""
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    """Layers of the encoder (``encoder``, ``seq2seq``) or of the decoder (``decoder``)."""
    n_decoder_layers: int | None = None
    """Decoder layers of ``seq2seq``; ``None`` means ``n_layers``."""
    d_ff: int = 2048
    dropout: float = 0.1
    """Dropout on embeddings, every sub-layer output and inside the feed-forward."""
    attention_dropout: float = 0.0
    """Dropout on the attention weights."""
    activation: str = "relu"
    norm_first: bool = False
    """Pre-LN (``True``) or post-LN as in the paper (``False``)."""
    final_norm: bool | None = None
    """LayerNorm after the last layer of each stack; ``None`` means ``norm_first``."""
    layer_norm_eps: float = 1e-5
    bias: bool = True
    positional: str = "sinusoidal"
    max_len: int = 512
    """Longest sequence for learned positions (sinusoidal ones extend on demand)."""
    scale_embedding: bool = True
    """Multiply token embeddings by sqrt(d_model), as in the paper."""
    share_embeddings: bool = False
    """``seq2seq``: one embedding table for source and target (needs equal vocabularies)."""
    tie_output: bool = True
    """Tie the output projection to the (target) token embedding."""
    head: str | None = None
    """``encoder`` only: ``classification``, ``regression``, ``token_classification`` or none."""
    num_labels: int = 2
    """Classes, tags, or regression outputs (``output_dim``) of the head."""
    pooling: str = "mean"
    """Sentence vector of sequence heads: ``mean`` over real tokens or the ``first`` token."""

    def __post_init__(self) -> None:
        _one_of(self, "arch", ARCHITECTURES)
        _positive(self, "vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len")
        for name in ("tgt_vocab_size", "n_decoder_layers"):
            if getattr(self, name) is not None:
                _positive(self, name)
        _require(
            self.d_model % self.n_heads == 0,
            f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}",
        )
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            _require(
                isinstance(value, (int, float)) and 0.0 <= value < 1.0,
                f"{name}={value!r} must be in [0, 1)",
            )
        _require(self.layer_norm_eps > 0, f"layer_norm_eps={self.layer_norm_eps!r} must be > 0")
        _one_of(self, "activation", tuple(ACTIVATIONS))
        _one_of(self, "positional", POSITIONALS)
        _one_of(self, "pooling", POOLINGS)
        if self.head is not None:
            _one_of(self, "head", HEADS)
            _require(self.arch == "encoder", f"head={self.head!r} needs arch='encoder'")
            _positive(self, "num_labels")
        if self.share_embeddings:
            _require(self.arch == "seq2seq", "share_embeddings=True needs arch='seq2seq'")
            _require(
                self.target_vocab_size == self.vocab_size,
                f"share_embeddings=True needs tgt_vocab_size={self.tgt_vocab_size} "
                f"equal to vocab_size={self.vocab_size}",
            )

    @property
    def target_vocab_size(self) -> int:
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def use_final_norm(self) -> bool:
        return self.norm_first if self.final_norm is None else self.final_norm
