"""The names that config fields choose implementations by, each declared once, and
:class:`Registry`, which maps them to their implementations.

This module imports neither torch nor the rest of the package: ``config.py`` validates its
fields against the names declared here, and the modules that implement them register them
beside their code (norms in ``nn/norm.py``, heads in ``models/heads.py``, tasks in their
modules of ``tasks/``, ...). A name can only be registered if it is declared here, and a
test holds that every declared name is registered, so the names a config accepts are those
the package implements.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

DECLARED: dict[str, tuple[str, ...]] = {}
"""Config field -> the names it may take."""


def declare(field: str, *names: str) -> tuple[str, ...]:
    """Declare the names that ``field`` may take; returns them."""
    DECLARED[field] = names
    return names


ARCHITECTURES = declare("arch", "encoder", "decoder", "seq2seq")
"""``scratchformer.models.MODELS``."""
ATTENTIONS = declare("attention", "multi_head", "latent")
"""``scratchformer.nn.attention.ATTENTIONS`` (``latent``: ``scratchformer.nn.latent_attention``)."""
ACTIVATIONS = declare("activation", "relu", "gelu", "gelu_tanh", "silu")
"""``scratchformer.nn.feedforward.ACTIVATIONS``."""
FEED_FORWARDS = declare("feed_forward", "plain", "gated")
"""``scratchformer.nn.feedforward.FEED_FORWARDS``; ``ModelConfig.gated`` chooses."""
NORMS = declare("norm", "layer", "rms")
"""``scratchformer.nn.norm.NORMS``."""
ROPE_SCALINGS = declare("rope_scaling", "linear", "llama3")
"""``scratchformer.nn.rotary.ROPE_SCALINGS``."""
POSITIONALS = declare("positional", "sinusoidal", "learned", "rotary", "alibi", "relative")
"""``scratchformer.models.positional.POSITIONALS``."""
HEADS = declare(
    "head",
    "classification",
    "regression",
    "similarity",
    "token_classification",
    "span",
    "mlm",
    "rtd",
)
"""``scratchformer.models.heads.HEADS`` (``rtd``: ``scratchformer.models.electra``)."""
TASKS = declare(
    "task",
    "lm",
    "translation",
    "synthetic",
    "classification",
    "regression",
    "similarity",
    "tagging",
    "qa",
    "mlm",
    "rtd",
    "span_corruption",
    "denoising",
    "contrastive",
    "sft",
    "dpo",
)
"""``scratchformer.tasks.TASKS``: ``Recipe.task``."""
SCHEDULES = declare("schedule", "noam", "cosine", "constant", "inverse_sqrt")
"""``scratchformer.training.schedule.SCHEDULES``: ``TrainConfig.schedule``."""
TOKENIZERS = declare("tokenizer", "char", "bpe", "wordpiece")
"""``scratchformer.data.tokenizer.TOKENIZERS``: ``DataConfig.tokenizer``."""
DATASETS = declare("dataset", "tinyshakespeare", "multi30k", "sst2", "conll2003", "stsb", "squad")
"""``scratchformer.data.registry.DATASETS``: ``DataConfig.dataset`` (which the synthetic task
reads as its own names, ``copy`` and ``reverse``, instead) and ``data.pretraining.corpus``."""


class Registry(Generic[T]):
    """The implementations of one field's declared names: ``registry[name]`` is the one
    registered under ``name``; an unknown name is a ``ValueError`` naming the field."""

    def __init__(self, field: str) -> None:
        if field not in DECLARED:
            raise ValueError(f"no names are declared for {field!r} in scratchformer.registry")
        self.field = field
        self.names = DECLARED[field]
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` under ``name``, which must be declared and not yet taken."""
        if name not in self.names:
            raise ValueError(
                f"{self.field}={name!r} is not declared in scratchformer.registry "
                f"(declared: {', '.join(self.names)})"
            )
        if name in self._entries:
            raise ValueError(f"{self.field}={name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator form of :meth:`add`."""
        return lambda entry: self.add(name, entry)

    def check(self, name: str) -> None:
        """A ``ValueError`` naming the field unless ``name`` is registered."""
        if name not in self._entries:
            raise ValueError(f"{self.field}={name!r} must be one of {', '.join(self)}")

    def __getitem__(self, name: str) -> T:
        self.check(name)
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        """The registered names, in the order of their declaration."""
        return (name for name in self.names if name in self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        """The registered names and their entries, in the order of their declaration."""
        return ((name, self._entries[name]) for name in self)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.field!r}: {', '.join(self)})"
