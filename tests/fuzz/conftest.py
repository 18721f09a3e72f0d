"""The fuzz tests' inputs to damage: tiny Hugging Face checkpoints of each family (built as
the interop tests build them) and trained runs (the suite's shared ones, and a tagger)."""

from pathlib import Path

import pytest

from helpers import train
from interop.conftest import (  # noqa: F401  (fixtures, registered here by name)
    llama_checkpoint,
    minilm,
    tiny_bert,
    tiny_gpt2,
)

CONLL = "Peter B-PER\nwent O\nto O\nParis B-LOC\n\nAnna B-PER\nsings O\n\n"


@pytest.fixture(scope="session")
def tagging_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny tagger (``recipes/conll2003.toml``) trained on a CoNLL file written here."""
    directory = tmp_path_factory.mktemp("tagging")
    data = directory / "train.txt"
    data.write_text(CONLL * 5, encoding="utf-8")
    settings = [f"data.train='{data}'", f"data.val='{data}'", "data.dataset=none"]
    train(directory / "run", "conll2003.toml", *settings, "data.vocab_size=60")
    return directory / "run"
