"""The language-model run of the serving tests, trained here, and its server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import live, train

TEXT = "to be or not to be, that is the question: whether 'tis nobler in the mind.\n" * 30


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama-style language model with a byte-level BPE tokenizer (it has an eos
    token), trained on a line of Hamlet until it writes text (not stray bytes)."""
    text = tmp_path_factory.mktemp("lm-text") / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    run_dir = tmp_path_factory.mktemp("runs") / "lm"
    train(
        run_dir,
        "shakespeare-llama.toml",
        f"data.train='{text}'",
        f"data.val='{text}'",
        "data.dataset=none",
        "data.tokenizer=bpe",
        "data.vocab_size=300",
        "data.block_size=16",
        "model.max_len=64",
        "model.n_kv_heads=2",
        "train.max_steps=60",
        "train.eval_every=60",
    )
    return run_dir


@pytest.fixture(scope="session")
def lm_url(lm_run: Path) -> Iterator[str]:
    with live(lm_run, max_batch=4, max_queue=64) as url:
        yield url
