"""Denoising pretraining (BART's and mBART's objective) of an encoder-decoder on a corpus
of sentences: the encoder reads a sentence with spans masked (each by one mask token, of
Poisson lengths) and, optionally, tokens deleted (:func:`~scratchformer.data.noise.infill`);
the decoder, teacher-forced as in translation, writes the whole sentence back.

Unlike span corruption (:mod:`.span_corruption`), whose targets are the short hidden spans,
the decoder practises writing whole sentences of each language of the corpus: what a
translation fine-tune (``train.init_from``) asks of it (Liu et al. 2020). An example is one
document of the corpus (a Multi30k caption, an SST-2 sentence), its first ``data.max_len``
tokens; a batch draws its documents and its noise from ``(seed, index)``, so a resumed run
draws what the uninterrupted one would. Evaluation walks the held-out documents in order,
with the same noise at every evaluation, and reports the loss and token accuracy.

The tokenizer has translation's specials and one sentinel, ``<extra_id_0>``, the mask
token: one vocabulary for both languages, which the fine-tune reads and writes with.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..data.noise import infill
from .base import Batch, register_task
from .corpus import CorpusTask
from .translation import seq2seq_batch, specials, start_id

EVAL_SEED = 2**31 - 1
"""Seeds the noise of evaluation batches: the same noise at every evaluation."""


@register_task
class DenoisingTask(CorpusTask):
    """Pretrain an encoder-decoder to write out whole sentences from noised ones."""

    name = "denoising"
    arch = "seq2seq"
    metric = "loss"
    higher_is_better = False
    loss_in_forward = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bounds: dict[tuple[str, str | None], np.ndarray] = {}

    def prepare(self) -> None:
        roles = specials(self.recipe.model.decoder_start)
        tokenizer = self.train_tokenizer(self.documents("train"), roles, sentinels=1)
        self.tokenizers = {"tokenizer": tokenizer}

    def model_sizes(self) -> dict[str, Any]:
        vocab_size = self.tokenizer().vocab_size
        return {"vocab_size": vocab_size, "tgt_vocab_size": vocab_size}

    def start_id(self) -> int:
        """The token the decoder reads first: ``model.decoder_start``'s."""
        return start_id(self.tokenizer(), self.recipe.model.decoder_start)

    def separator(self) -> list[int]:
        """The eos token after each document: where one ends, for :meth:`bounds`."""
        return [self.tokenizer().eos_id]

    def bounds(self, split: str, path: str | None = None) -> np.ndarray:
        """The ``(documents + 1,)`` offsets in the split's stream where each document
        starts (and the last ends), found once from the eos tokens after them."""
        key = (split, path)
        if key not in self._bounds:
            ids = self.stream(split, path).ids
            ends = np.flatnonzero(np.asarray(ids) == self.tokenizer().eos_id)
            if not len(ends):
                raise ValueError(f"the {split} corpus holds no document")
            self._bounds[key] = np.concatenate([[0], ends + 1])
        return self._bounds[key]

    def document(self, split: str, index: int, path: str | None = None) -> list[int]:
        """The ids of document ``index``, at most ``data.max_len - 1`` of them (eos ends
        the target)."""
        bounds = self.bounds(split, path)
        start = int(bounds[index])
        end = min(int(bounds[index + 1]) - 1, start + self.data.max_len - 1)
        return np.asarray(self.stream(split, path).ids[start:end]).tolist()

    def noised(self, documents: list[list[int]], generator: torch.Generator) -> Batch:
        """The documents with ``generator``'s noise as the encoder's inputs and whole as the
        decoder's targets, a seq2seq batch (documents of fewer than two tokens left out)."""
        tokenizer, options, start = self.tokenizer(), self.data.denoising, self.start_id()
        (mask,) = tokenizer.sentinel_ids
        pairs = []
        for ids in documents:
            if len(ids) < 2:
                continue
            noised = infill(
                ids,
                mask,
                options.mask_ratio,
                options.poisson_lambda,
                generator,
                options.delete_ratio,
            )
            pairs.append(([*noised, tokenizer.eos_id], [start, *ids, tokenizer.eos_id]))
        return seq2seq_batch(pairs, tokenizer.pad_id, tokenizer.pad_id)

    def global_batch(self, index: int, parts: int) -> Batch:
        generator = torch.Generator().manual_seed(self.train_config.seed * 1_000_003 + index)
        count = len(self.bounds("train")) - 1
        size = self.train_config.batch_size * parts
        drawn = torch.randint(count, (size,), generator=generator).tolist()
        return self.noised([self.document("train", i) for i in drawn], generator)

    def eval_batches(self, split: str, path: str | None = None) -> Iterator[Batch]:
        count = len(self.bounds(split, path)) - 1
        size = self.train_config.batch_size
        for number, first in enumerate(range(0, count, size)):
            documents = [
                self.document(split, i, path) for i in range(first, min(first + size, count))
            ]
            if any(len(ids) >= 2 for ids in documents):
                generator = torch.Generator().manual_seed(EVAL_SEED + number)
                yield self.noised(documents, generator)
