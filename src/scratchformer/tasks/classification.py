"""Sequence classification (one label a sentence or sentence pair) and regression (one
value a sentence or pair), with a cross-encoder: both sentences of a pair in one input,
the encoder, and a pooled head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.batching import pad_batch
from ..data.readers import LabeledText
from ..data.text import SHARED_SEGMENT, pair_segments, shared_words
from ..metrics import macro_f1
from ..predictions import Record
from .base import Batch, TokenLabels, add, register_task
from .sentences import SentenceTask, ValueTask


@dataclass(frozen=True)
class Label(Record):
    """The likeliest class of a sentence or pair, and its probability."""

    label: str
    probability: float

    def line(self) -> str:
        return f"{self.label}\t{self.probability:.4f}"


@dataclass(frozen=True)
class Encoded:
    """Token ids, segment ids, and the class index or value to predict (0 when unknown);
    with ``data.pairs.symmetric_pairs``, the pair in the other order too."""

    ids: list[int]
    segments: list[int]
    target: int | float
    swapped: Encoded | None = None


class MarkedIds(list[int]):
    """A text's token ids and, per token, whether its word is a word of the other sentence
    of the pair too (``data.pairs.mark_shared_words``)."""

    def __init__(self, ids: Sequence[int], shared: Sequence[bool]) -> None:
        super().__init__(ids)
        self.shared = list(shared)


class CrossEncoderTask(SentenceTask):
    """Base of the tasks that read ``[CLS] sentence [SEP]``, or ``[CLS] a [SEP] b [SEP]``
    with segment ids for a pair, as one input."""

    def segment_types(self) -> int:
        """Segment embeddings: two for sentence pairs, three when their shared words are
        marked (or the recipe's, if more)."""
        needed = pair_segments(self.data.pairs.mark_shared_words) if self._has_pairs() else 0
        return max(self.recipe.model.type_vocab_size, needed)

    def pieces(self, inputs: Sequence[Sequence[str]]) -> list[list[list[int]]]:
        """The token ids of each text, uncut; with ``data.pairs.mark_shared_words``, a pair's as
        :class:`MarkedIds`."""
        if not self.data.pairs.mark_shared_words:
            return super().pieces(inputs)
        return [
            self.marked(texts) if len(texts) == 2 else super().pieces([texts])[0]
            for texts in inputs
        ]

    def marked(self, texts: Sequence[str]) -> list[list[int]]:
        """A pair's token ids, each text's with the words it shares with the other marked."""
        tokenizer = self.tokenizer()
        encoded = [tokenizer.encode_offsets(text) for text in texts]
        return [
            MarkedIds(ids, shared_words(text, other, offsets))
            for (ids, offsets), text, other in zip(encoded, texts, texts[::-1], strict=True)
        ]

    def encode_pieces(self, pieces: Sequence[list[int]], target: int | float = 0) -> Encoded:
        """``[CLS] text [SEP]``, or ``[CLS] a [SEP] b [SEP]`` with segments 0 and 1 (and
        ``[CLS] b [SEP] a [SEP]`` with ``data.pairs.symmetric_pairs``)."""
        if len(pieces) != 2:
            ids = self.wrap(pieces[0])
            return Encoded(ids, [0] * len(ids), target)
        first = self.join(*pieces, target)
        if not self.data.pairs.symmetric_pairs:
            return first
        return replace(first, swapped=self.join(*reversed(pieces), target))

    def join(self, first: list[int], second: list[int], target: int | float) -> Encoded:
        """``[CLS] first [SEP] second [SEP]``, cut to ``data.max_len``; the shared words of
        :class:`MarkedIds` get :data:`~scratchformer.data.text.SHARED_SEGMENT`."""
        ids, segments = self.tokenizer().join_pair(first, second, max_len=self.data.max_len)
        kept_first, kept_second = segments.count(0) - 2, segments.count(1) - 1
        shared = [
            False,
            *getattr(first, "shared", [False] * len(first))[:kept_first],
            False,
            *getattr(second, "shared", [False] * len(second))[:kept_second],
            False,
        ]
        segments = [
            SHARED_SEGMENT if s else segment for segment, s in zip(segments, shared, strict=True)
        ]
        return Encoded(ids, segments, target)

    def tokens_needed(self, pieces: Sequence[list[int]]) -> int:
        """``[CLS] a [SEP] b [SEP]`` read as one input, uncut."""
        return sum(len(ids) + 1 for ids in pieces) + 1

    def length(self, example: Encoded) -> int:
        return len(example.ids) * (1 if example.swapped is None else 2)

    def collate(self, examples: Sequence[Encoded]) -> Batch:
        """Padded ids and mask, and segment ids for pairs; with ``data.pairs.symmetric_pairs``
        of shape ``(pairs, 2, seq)``, each pair in both orders (a batch's rows stay pairs,
        so that it slices as other batches do)."""
        both = self.data.pairs.symmetric_pairs and self._has_pairs()
        rows = [o for e in examples for o in ((e, e.swapped) if both else (e,))]
        ids, mask = pad_batch([e.ids for e in rows], self.tokenizer().pad_id)
        inputs = {"input_ids": ids, "attention_mask": mask}
        if self._has_pairs():
            inputs["token_type_ids"], _ = pad_batch([e.segments for e in rows], 0)
        if both:
            inputs = {k: v.view(len(examples), 2, -1) for k, v in inputs.items()}
        targets = torch.tensor([e.target for e in examples], dtype=self.target_dtype)
        return Batch(inputs, targets, int(mask.sum()))

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        """The model's logits; for pairs read in both orders, their mean, so that the
        prediction does not depend on the order."""
        ids = batch.inputs["input_ids"]
        if ids.dim() == 2:
            return super().logits(model, batch)
        rows = model(**{k: v.flatten(0, 1) for k, v in batch.inputs.items()}).logits
        return rows.view(ids.shape[0], 2, -1).mean(1)

    def attention_inputs(self, text: str) -> tuple[dict[str, Tensor], TokenLabels]:
        """A sentence, or for pair tasks ``first<TAB>second`` (in that order), as in
        training."""
        inputs = self.collate(self.encode_inputs([self.split_line(text)], [0])).inputs
        inputs = {k: v[:, 0] if v.dim() == 3 else v for k, v in inputs.items()}  # one order
        words = self.tokenizer().labels(inputs["input_ids"][0].tolist())
        return inputs, {"encoder": (words, words)}


@register_task
class ClassificationTask(CrossEncoderTask):
    """Sentence or pair -> encoder -> pooled head -> class logits; cross-entropy, accuracy,
    macro F1."""

    name = "classification"
    head = "classification"
    metric = "accuracy"
    higher_is_better = True

    def read(self, split: str, path: str | None = None) -> list[LabeledText]:
        return self.read_labelled(split, path, labels=None if split == "train" else self.labels())

    def prepare(self) -> None:
        examples = self.read("train")
        self.learn_tokenizer(examples)
        if self.data.labels is None:
            self.data.labels = sorted({str(example.label) for example in examples})

    def model_sizes(self) -> dict[str, Any]:
        return {
            "vocab_size": self.tokenizer().vocab_size,
            "num_labels": len(self.labels()),
            "type_vocab_size": self.segment_types(),
        }

    def encode(self, raw: Sequence[LabeledText]) -> list[Encoded]:
        index = {label: i for i, label in enumerate(self.labels())}
        labels = [index[str(example.label)] for example in raw]
        return self.encode_inputs([example.texts for example in raw], labels)

    def records(self, model: nn.Module, inputs: list[str], *, progress: bool) -> list[Label]:
        """For each text (a sentence, or two tab-separated sentences for pair tasks): the
        most probable label and its probability."""
        labels = self.labels()
        predictions = []
        for logits in self.line_logits(model, inputs, progress):
            probabilities, best = logits.softmax(-1).max(-1)
            predictions += [
                Label(labels[i], p)
                for i, p in zip(best.tolist(), probabilities.tolist(), strict=True)
            ]
        return predictions

    def accumulate(self, totals: dict[str, Any], logits: Tensor, batch: Batch) -> None:
        targets = batch.targets
        loss = F.cross_entropy(logits, targets, reduction="sum")
        predicted = logits.argmax(-1)
        add(
            totals,
            loss_sum=loss.item(),
            targets=len(targets),
            correct=(predicted == targets).sum().item(),
        )
        totals.setdefault("predicted", []).extend(predicted.tolist())
        totals.setdefault("gold", []).extend(targets.tolist())

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        return {
            **super().summarize(totals),
            "macro_f1": macro_f1(totals["predicted"], totals["gold"]),
        }


@register_task
class RegressionTask(CrossEncoderTask, ValueTask):
    """Sentence or pair -> encoder -> pooled head -> one value; mean squared error, Pearson
    and Spearman correlation."""

    name = "regression"
    head = "regression"

    def model_sizes(self) -> dict[str, Any]:
        return {
            "vocab_size": self.tokenizer().vocab_size,
            "num_labels": 1,
            "type_vocab_size": self.segment_types(),
        }

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        return F.mse_loss(self.logits(model, batch).squeeze(-1).float(), batch.targets)

    def accumulate(self, totals: dict[str, Any], logits: Tensor, batch: Batch) -> None:
        targets = batch.targets
        super().accumulate(totals, logits, batch)
        add(totals, loss_sum=F.mse_loss(logits.squeeze(-1), targets, reduction="sum").item())

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        return {"mse": totals["loss_sum"] / max(totals["targets"], 1), **super().summarize(totals)}
