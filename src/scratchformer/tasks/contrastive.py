"""Contrastive sentence pretraining of an encoder on unlabelled text (SimCSE, Gao et al.
2021): each sentence of a batch goes through the encoder twice, and dropout alone makes
the two passes differ; each first pass must pick its own second pass out of the batch's
by the cosine of their mean vectors (InfoNCE, the other sentences the negatives).

Masked LM teaches words; this teaches the sentence vectors a bi-encoder compares, without
any labelled pair: a run of this task is a :class:`~.similarity.SimilarityTask` model (the
same head) whose body a similarity fine-tune starts from (``train.init_from``). The
corpus is read as :class:`~.corpus.CorpusTask` reads it, its documents cut into sentences
(:func:`~scratchformer.data.text.sentences`), each sentence once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.batching import pad_batch
from ..data.text import sentences
from ..device import model_device
from ..models.heads import pool
from .base import Batch, ExampleTask, register_task
from .corpus import CorpusTask

SPECIALS = ("pad", "unk", "cls", "sep")
TEMPERATURE = 0.05
"""Divides the cosines before the softmax over a batch (SimCSE's 0.05)."""
EVAL_SEED = 2**31 - 1
"""Seeds the dropout of evaluation batches: the same two views at every evaluation."""


@register_task
class ContrastiveTask(CorpusTask, ExampleTask):
    """Sentences -> the encoder twice, dropout on -> mean vectors -> each first view's
    cosines to every second view of the batch; cross-entropy towards its own."""

    name = "contrastive"
    arch = "encoder"
    head = "similarity"
    metric = "loss"
    higher_is_better = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.train_config.rdrop:
            raise ValueError("[train] rdrop compares class predictions; contrastive has none")
        self._sentences: dict[tuple[str, str | None], list[str]] = {}

    # -- data --------------------------------------------------------------------------

    def read(self, split: str, path: str | None = None) -> list[str]:
        """The distinct sentences of a split's documents (:func:`distinct_sentences`), read
        once: the tokenizer and the examples share them."""
        key = (split, path)
        if key not in self._sentences:
            self._sentences[key] = list(distinct_sentences(self.documents(split, path)))
        return self._sentences[key]

    def prepare(self) -> None:
        self.tokenizers = {"tokenizer": self.train_tokenizer(self.read("train"), SPECIALS)}

    def model_sizes(self) -> dict[str, Any]:
        return {"vocab_size": self.tokenizer().vocab_size, "num_labels": 1}

    def encode(self, raw: Sequence[str]) -> list[list[int]]:
        """``[CLS] sentence [SEP]``, cut to ``data.max_len``."""
        tokenizer, max_len = self.tokenizer(), self.data.max_len
        return [tokenizer.wrap(ids, max_len=max_len) for ids in tokenizer.encode_batch(raw)]

    def length(self, example: list[int]) -> int:
        return 2 * len(example)

    def collate(self, examples: Sequence[list[int]]) -> Batch:
        """Padded ids and mask; the targets, each row's own index, say where its positive
        is (recomputed after slicing, see :meth:`positives`)."""
        ids, mask = pad_batch(list(examples), self.tokenizer().pad_id)
        return Batch(
            {"input_ids": ids, "attention_mask": mask},
            torch.arange(len(examples)),
            2 * int(mask.sum()),
        )

    # -- loss and metrics --------------------------------------------------------------

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        """``(rows, rows)``: the cosine of row i's first view to row j's second, over the
        temperature. Both views run as one batch, so that dropout draws apart for each."""
        ids, mask = batch.inputs["input_ids"], batch.inputs["attention_mask"]
        hidden, _ = model.encode(torch.cat([ids, ids]), torch.cat([mask, mask]))
        vectors = F.normalize(pool(hidden, torch.cat([mask, mask]), model.config.pooling), dim=-1)
        first, second = vectors.float().chunk(2)
        return first @ second.T / TEMPERATURE

    @staticmethod
    def positives(logits: Tensor) -> Tensor:
        """Row i's positive is column i, whichever slice of a batch the rows are."""
        return torch.arange(logits.shape[0], device=logits.device)

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        logits = self.logits(model, batch)
        return F.cross_entropy(
            logits, self.positives(logits), label_smoothing=self.train_config.label_smoothing
        )

    def score(self, totals: dict[str, Any], model: nn.Module, batch: Batch) -> None:
        """The training loss and the share of rows that pick their own second view, on a
        held-out batch with dropout on (without it the two views are one), seeded by the
        batch's place so that every evaluation draws the same masks."""
        device = model_device(model)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(EVAL_SEED - totals.get("targets", 0))
            model.train()
            try:
                logits = self.logits(model, batch)
            finally:
                model.eval()
        self.accumulate(totals, logits, Batch(batch.inputs, self.positives(logits), batch.tokens))

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        """Mean loss, and the share of rows whose likeliest second view is their own."""
        count = max(totals["targets"], 1)
        return {"loss": totals["loss_sum"] / count, "accuracy": totals["correct"] / count}

    def eval_batches(self, split: str, path: str | None = None) -> Iterator[Batch]:
        """Batches of ``train.batch_size`` sentences, in order: the negatives of a held-out
        sentence are those of its batch, as in training."""
        examples = self.examples(split, path)
        size = self.train_config.batch_size
        for start in range(0, len(examples) - 1, size):
            yield self.collate(examples[start : start + size])


def distinct_sentences(documents: Iterable[str]) -> Iterator[str]:
    """The sentences of ``documents``, white space collapsed, each once, in order of first
    sight."""
    seen: set[str] = set()
    for document in documents:
        for start, end in sentences(document):
            sentence = " ".join(document[start:end].split())
            if sentence and sentence not in seen:
                seen.add(sentence)
                yield sentence
