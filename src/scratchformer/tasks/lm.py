"""Language modelling: predict the next token of a text (decoder-only model)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..data.batching import TokenStream, lm_batch, lm_eval_blocks
from ..data.readers import read_text
from ..data.registry import shakespeare_text
from .base import Batch, Task


class LanguageModelTask(Task):
    """A corpus becomes one token stream; training samples random ``block_size`` windows
    (as nanoGPT does), evaluation walks the validation stream in consecutive blocks."""

    name = "lm"
    arch = "decoder"
    metric = "loss"
    higher_is_better = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._streams: dict[tuple[str, str | None], TokenStream] = {}

    def text(self, split: str, path: str | None = None) -> str:
        """The raw text of a split: a named corpus, the recipe's file, or ``path``."""
        path = path or getattr(self.data, split, None)
        if path is not None:
            return read_text(path)
        if self.data.dataset == "tinyshakespeare":
            return shakespeare_text(split, root=self.data.root)
        raise ValueError(
            f"no {split} text: set data.dataset = 'tinyshakespeare' or data.{split} = FILE"
        )

    def prepare(self) -> None:
        specials = ("unk",) if self.data.tokenizer == "char" else ("unk", "eos")
        self.tokenizers = {
            "tokenizer": self.train_tokenizer(self._pieces(self.text("train")), specials)
        }

    def model_sizes(self) -> dict[str, Any]:
        return {"vocab_size": self.tokenizer().vocab_size}

    def stream(self, split: str, path: str | None = None) -> TokenStream:
        """The token ids of a split, encoded once."""
        key = (split, path)
        if key not in self._streams:
            tokenizer = self.tokenizer()
            pieces = self._pieces(self.text(split, path))
            ids = [i for piece in tokenizer.encode_batch(pieces) for i in piece]
            dtype = np.uint16 if tokenizer.vocab_size < 2**16 else np.uint32
            self._streams[key] = TokenStream(np.asarray(ids, dtype=dtype))
        return self._streams[key]

    def global_batch(self, index: int, parts: int) -> Batch:
        generator = torch.Generator().manual_seed(self.train_config.seed * 1_000_003 + index)
        x, y = lm_batch(
            self.stream("train"),
            self.train_config.batch_size * parts,
            self.data.block_size,
            generator,
        )
        return Batch({"input_ids": x}, y, x.numel())

    def eval_batches(self, split: str, path: str | None = None) -> Iterator[Batch]:
        for x, y in lm_eval_blocks(
            self.stream(split, path), self.train_config.batch_size, self.data.block_size
        ):
            yield Batch({"input_ids": x}, y, x.numel())

    def _pieces(self, text: str) -> list[str]:
        """The text cut into lines (newlines kept) for sub-word tokenizers, which then
        encode in parallel; a char tokenizer takes it whole."""
        return [text] if self.data.tokenizer == "char" else text.splitlines(keepends=True)
