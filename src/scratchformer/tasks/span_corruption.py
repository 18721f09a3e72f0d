"""Span-corruption pretraining (T5's objective) of an encoder-decoder on a text corpus.

The corpus (:mod:`scratchformer.data.corpus`) is encoded once into a memory-mapped token
stream, documents running on as T5 packs them. A training example is a random window of
the stream, as long as fits ``data.max_len`` once corrupted
(:func:`~scratchformer.data.noise.raw_length`), with random spans hidden afresh for every
batch (:mod:`scratchformer.data.noise`): the encoder reads the window with a sentinel for
each span, and the decoder, teacher-forced as in translation, predicts the spans after
their sentinels. Evaluation walks the held-out stream in consecutive windows, the same
spans hidden at every evaluation, and reports the loss and accuracy on the targets.

The tokenizer (with ``data.sentinels`` sentinels and translation's specials) is one
vocabulary for both sides, so that a translation fine-tune (``model.init_from``) reads and
writes with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..data.batching import consecutive_windows, random_windows
from ..data.noise import corrupt, noise_counts, random_spans_noise_mask, raw_length
from .base import Batch
from .corpus import CorpusTask
from .translation import seq2seq_batch, specials, start_id

EVAL_SEED = 2**31 - 1
"""Seeds the noise of evaluation batches: the same spans hidden at every evaluation."""


class SpanCorruptionTask(CorpusTask):
    """Pretrain an encoder-decoder to write out the spans hidden from its input."""

    name = "span_corruption"
    arch = "seq2seq"
    metric = "loss"
    higher_is_better = False
    loss_in_forward = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        data = self.data
        self.window = raw_length(data.max_len, data.noise_density, data.mean_span_length)
        """Tokens of the corpus in an example: as many as fit ``data.max_len`` corrupted."""
        spans = noise_counts(self.window, data.noise_density, data.mean_span_length)[1]
        if spans > data.sentinels:
            raise ValueError(
                f"[data] sentinels={data.sentinels} is fewer than the {spans} spans hidden "
                f"in an input of max_len={data.max_len} tokens"
            )

    # -- data --------------------------------------------------------------------------

    def prepare(self) -> None:
        texts = self.documents("train")
        roles = specials(self.recipe.model.decoder_start)
        tokenizer = self.train_tokenizer(texts, roles, sentinels=self.data.sentinels)
        self.tokenizers = {"tokenizer": tokenizer}

    def model_sizes(self) -> dict[str, Any]:
        vocab_size = self.tokenizer().vocab_size
        return {"vocab_size": vocab_size, "tgt_vocab_size": vocab_size}

    def corrupted(self, windows: np.ndarray, generator: torch.Generator) -> Batch:
        """The windows with spans hidden by ``generator``'s draws, as ``(input, target)``
        pairs of a seq2seq batch."""
        tokenizer, data = self.tokenizer(), self.data
        start = start_id(tokenizer, self.recipe.model.decoder_start)
        pairs = []
        for ids in windows.tolist():
            noise = random_spans_noise_mask(
                len(ids), data.noise_density, data.mean_span_length, generator
            )
            inputs, targets = corrupt(ids, noise, tokenizer.sentinel_ids, tokenizer.eos_id)
            pairs.append((inputs, [start, *targets]))
        return seq2seq_batch(pairs, tokenizer.pad_id, tokenizer.pad_id)

    def global_batch(self, index: int, parts: int) -> Batch:
        generator = torch.Generator().manual_seed(self.train_config.seed * 1_000_003 + index)
        size = self.train_config.batch_size * parts
        windows = random_windows(self.stream("train"), size, self.window, generator)
        return self.corrupted(windows, generator)

    def eval_batches(self, split: str, path: str | None = None) -> Iterator[Batch]:
        windows = consecutive_windows(
            self.stream(split, path), self.train_config.batch_size, self.window
        )
        for i, batch in enumerate(windows):
            if batch.shape[1] >= 2:  # a last window of one token has nothing to hide
                yield self.corrupted(batch, torch.Generator().manual_seed(EVAL_SEED + i))
