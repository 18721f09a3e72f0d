"""Masked-language-model pretraining (BERT's objective) of an encoder on a text corpus.

The corpus (:mod:`scratchformer.data.corpus`) is encoded once into a memory-mapped token
stream, documents separated by ``[SEP]``; a training example is a random window of
``data.max_len - 2`` tokens between ``[CLS]`` and ``[SEP]`` (documents packed, as RoBERTa
does), masked afresh for every batch (:func:`~scratchformer.data.masking.mask_tokens`).
Evaluation walks the held-out stream in consecutive windows, masked the same way at every
evaluation, and reports the loss and accuracy on the masked tokens.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..data.batching import consecutive_windows, random_windows
from ..data.masking import mask_tokens
from ..device import model_device
from ..nn.loss import IGNORE_INDEX
from ..predictions import FILL_MASK, TOP_K, Record
from .base import Batch, TokenLabels, per_line, progress_bar, register_task
from .corpus import CorpusTask

SPECIALS = ("pad", "unk", "cls", "sep", "mask")
MASK = "[MASK]"
"""How a text given to :meth:`MaskedLMTask.predict` marks the tokens to fill."""
EVAL_SEED = 2**31 - 1
"""Seeds the masks of evaluation batches: the same masks at every evaluation."""


@dataclass(frozen=True)
class Candidate:
    """A token that may fill a mask, and its probability."""

    token: str
    probability: float


@dataclass(frozen=True)
class Fills(Record):
    """For each ``[MASK]`` of a text, the likeliest tokens, likeliest first."""

    masks: list[list[Candidate]]

    def line(self) -> str:
        """``token probability`` pairs separated by tabs, the masks by `` | ``."""
        return " | ".join(
            "\t".join(f"{c.token} {c.probability:.4f}" for c in candidates)
            for candidates in self.masks
        )


@register_task
class MaskedLMTask(CorpusTask):
    """Pretrain an encoder to predict masked tokens from their context."""

    name = "mlm"
    arch = "encoder"
    head = "mlm"
    metric = "loss"
    higher_is_better = False
    predicts = FILL_MASK
    loss_in_forward = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.train_config.rdrop:
            raise ValueError("[train] rdrop compares class predictions; mlm has none")
        self._word_starts: Tensor | None = None

    # -- data --------------------------------------------------------------------------

    def prepare(self) -> None:
        self.tokenizers = {"tokenizer": self.train_tokenizer(self.documents("train"), SPECIALS)}

    def model_sizes(self) -> dict[str, Any]:
        return {"vocab_size": self.tokenizer().vocab_size}

    def separator(self) -> list[int]:
        return [self.tokenizer().sep_id]

    def masked(self, windows: np.ndarray, generator: torch.Generator) -> Batch:
        """``[CLS] window [SEP]`` rows, masked with ``generator``'s draws."""
        tokenizer = self.tokenizer()
        rows = torch.from_numpy(windows.astype(np.int64))
        column = (rows.shape[0], 1)
        first, last = (
            rows.new_full(column, tokenizer.cls_id),
            rows.new_full(column, tokenizer.sep_id),
        )
        rows = torch.cat([first, rows, last], dim=1)
        inputs, chosen = mask_tokens(
            rows,
            generator,
            mask_id=tokenizer.mask_id,
            special_ids=tokenizer.special_ids,
            vocab_size=tokenizer.vocab_size,
            probability=self.data.mlm.mask_probability,
            word_starts=self.word_starts(),
            mean_span=self.data.mlm.mask_span_length,
        )
        targets = rows.masked_fill(~chosen, IGNORE_INDEX)
        return Batch({"input_ids": inputs}, targets, inputs.numel())

    def word_starts(self) -> Tensor | None:
        """Which tokens begin a word, for whole-word masking (else ``None``)."""
        if self.data.mlm.whole_word_mask and self._word_starts is None:
            self._word_starts = torch.tensor(self.tokenizer().word_starts())
        return self._word_starts

    def global_batch(self, index: int, parts: int) -> Batch:
        generator = torch.Generator().manual_seed(self.train_config.seed * 1_000_003 + index)
        size = self.train_config.batch_size * parts
        windows = random_windows(self.stream("train"), size, self.data.max_len - 2, generator)
        return self.masked(windows, generator)

    def eval_batches(self, split: str, path: str | None = None) -> Iterator[Batch]:
        length, size = self.data.max_len - 2, self.train_config.batch_size
        for i, windows in enumerate(consecutive_windows(self.stream(split, path), size, length)):
            yield self.masked(windows, torch.Generator().manual_seed(EVAL_SEED + i))

    # -- loss and metrics --------------------------------------------------------------

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        """Vocabulary logits at the masked positions only, ``(masked, vocab)``."""
        hidden, _ = model.encode(**batch.inputs)
        return model.head(hidden[batch.targets != IGNORE_INDEX])

    def accumulate(self, totals: dict[str, Any], logits: Tensor, batch: Batch) -> None:
        masked = batch.targets[batch.targets != IGNORE_INDEX]
        super().accumulate(totals, logits, dataclasses.replace(batch, targets=masked))

    # -- inference ---------------------------------------------------------------------

    def encode_masked(self, text: str) -> list[int]:
        """``[CLS] text [SEP]``, each ``[MASK]`` of the text the mask token."""
        tokenizer = self.tokenizer()
        first, *rest = text.split(MASK)
        ids = [tokenizer.cls_id, *tokenizer.encode(first)]
        for piece in rest:
            ids += [tokenizer.mask_id, *tokenizer.encode(piece)]
        return [*ids, tokenizer.sep_id]

    def fill(
        self, model: nn.Module, text: str, top_k: int = TOP_K.default
    ) -> list[list[tuple[str, float]]]:
        """For each ``[MASK]`` of ``text``, the ``top_k`` likeliest tokens and their
        probabilities."""
        tokenizer = self.tokenizer()
        if MASK not in text:
            raise ValueError(f"no {MASK} in {text!r}: mark the tokens to fill with {MASK}")
        ids = self.encode_masked(text)
        if len(ids) > self.data.max_len:
            warnings.warn(
                f"the text has {len(ids)} tokens, more than the model was trained on "
                f"(data.max_len={self.data.max_len})",
                stacklevel=3,
            )
        device = model_device(model)
        with torch.no_grad():
            was_training = model.training
            model.eval()
            logits = model(torch.tensor([ids], device=device)).logits[0]
            model.train(was_training)
        masked = torch.tensor(ids, device=device) == tokenizer.mask_id
        top = logits[masked].float().softmax(-1).topk(top_k)
        return [
            list(zip(tokenizer.tokens(indices.tolist()), values.tolist(), strict=True))
            for values, indices in zip(top.values, top.indices, strict=True)
        ]

    def records(
        self, model: nn.Module, inputs: list[str], *, progress: bool, top_k: int
    ) -> list[Fills]:
        """The ``top_k`` likeliest fillers of each ``[MASK]`` of each text."""
        with progress_bar(len(inputs), progress) as bar:

            def fills(text: str) -> Fills:
                masks = self.fill(model, text, top_k)
                bar.update()
                return Fills([[Candidate(*c) for c in candidates] for candidates in masks])

            return per_line(inputs, fills)

    def example(self, text: str) -> str:
        """``text`` with a mask to fill."""
        return f"{text} {MASK}"

    def attention_inputs(self, text: str) -> tuple[dict[str, Tensor], TokenLabels]:
        """``[CLS] text [SEP]`` (``[MASK]`` marks stay masks), cut to ``data.max_len``."""
        *ids, sep = self.encode_masked(text)
        ids = [*ids[: self.data.max_len - 1], sep]
        labels = self.tokenizer().labels(ids)
        return {"input_ids": torch.tensor([ids])}, {"encoder": (labels, labels)}
