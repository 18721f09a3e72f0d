"""Sequence classification (one label a sentence or sentence pair) and regression (one
value a pair, e.g. semantic similarity), with an encoder and a pooled head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import Recipe
from ..data.batching import pad_batch
from ..data.readers import LabeledText, read_tsv
from ..data.registry import sst2_examples, stsb_examples
from ..metrics import correlations, macro_f1
from .base import Batch, ExampleTask, TokenLabels, add

SPECIALS = ("pad", "unk", "cls", "sep")
READERS = {"sst2": sst2_examples, "stsb": stsb_examples}
DEV_SPLIT = {"val": "dev"}
"""GLUE's and CoNLL's name for the validation split."""


@dataclass(frozen=True)
class Encoded:
    """Token ids, segment ids, and the class index or value to predict (0 when unknown)."""

    ids: list[int]
    segments: list[int]
    target: int | float


class ClassificationTask(ExampleTask):
    """``[CLS] sentence [SEP]`` (or ``[CLS] a [SEP] b [SEP]`` with segment ids for a pair)
    -> encoder -> pooled head -> class logits; cross-entropy, accuracy."""

    name = "classification"
    arch = "encoder"
    head = "classification"
    metric = "accuracy"
    higher_is_better = True
    command = "classify"
    regression = False

    def read(self, split: str, path: str | None = None) -> list[LabeledText]:
        path = path or getattr(self.data, split, None)
        data = self.data
        if path is not None:
            if data.text_columns is None or data.label_column is None:
                raise ValueError("a TSV file needs data.text_columns and data.label_column")
            labels = None if self.regression or split == "train" else self.labels()
            return read_tsv(
                path,
                tuple(data.text_columns),
                data.label_column,
                header=data.header,
                labels=labels,
                regression=self.regression,
            )
        if data.dataset in READERS:
            return READERS[data.dataset](DEV_SPLIT.get(split, split), data.root)
        raise ValueError(
            f"no {split} data: set data.dataset to one of {', '.join(READERS)} or data.{split} "
            "to a TSV file (with data.text_columns and data.label_column)"
        )

    def prepare(self) -> None:
        examples = self.read("train")
        texts = [text for example in examples for text in example.texts]
        self.tokenizers = {"tokenizer": self.train_tokenizer(texts, SPECIALS)}
        if not self.regression and self.data.labels is None:
            self.data.labels = sorted({str(example.label) for example in examples})

    def model_sizes(self) -> dict[str, Any]:
        pairs = self.recipe.model.type_vocab_size
        return {
            "vocab_size": self.tokenizer().vocab_size,
            "num_labels": 1 if self.regression else len(self.labels()),
            "type_vocab_size": max(pairs, 2 if self._has_pairs() else 0),
        }

    def _has_pairs(self) -> bool:
        columns = self.data.text_columns
        return self.data.dataset == "stsb" or (columns is not None and len(columns) == 2)

    def encode(self, raw: Sequence[LabeledText]) -> list[Encoded]:
        index = None if self.regression else {label: i for i, label in enumerate(self.labels())}
        return [
            self.encode_texts(
                example.texts, float(example.label) if index is None else index[str(example.label)]
            )
            for example in raw
        ]

    def encode_texts(self, texts: Sequence[str], target: int | float = 0) -> Encoded:
        """``[CLS] text [SEP]``, or ``[CLS] a [SEP] b [SEP]`` with segments 0 and 1."""
        if len(texts) == 2:
            ids, segments = self.tokenizer().encode_pair(*texts, max_len=self.data.max_len)
        else:
            ids = self.sentence_ids(texts[0])
            segments = [0] * len(ids)
        return Encoded(ids, segments, target)

    def sentence_ids(self, text: str) -> list[int]:
        """``[CLS] text [SEP]``, the text cut to fit ``data.max_len``."""
        tokenizer = self.tokenizer()
        return [
            tokenizer.cls_id,
            *tokenizer.encode(text)[: self.data.max_len - 2],
            tokenizer.sep_id,
        ]

    def predict(self, model: nn.Module, lines: Sequence[str]) -> list[tuple[str, float]]:
        """For each line (a sentence, or two tab-separated sentences for pair tasks): the
        most probable label and its probability."""
        encoded = [self.encode_texts(self.split_line(line)) for line in lines]
        labels = self.labels()
        predictions = []
        for logits, _ in self.forward_in_order(model, encoded):
            probabilities, best = logits.softmax(-1).max(-1)
            predictions += [
                (labels[i], p) for i, p in zip(best.tolist(), probabilities.tolist(), strict=True)
            ]
        return predictions

    def predict_lines(self, model: nn.Module, lines: Sequence[str], **options: Any) -> list[str]:
        """``label<TAB>probability`` for each line."""
        return [f"{label}\t{probability:.4f}" for label, probability in self.predict(model, lines)]

    def attention_inputs(self, text: str) -> tuple[dict[str, Tensor], TokenLabels]:
        """A sentence, or for pair tasks ``first<TAB>second``, as in training."""
        inputs = self.collate([self.encode_texts(self.split_line(text))]).inputs
        words = self.tokenizer().labels(inputs["input_ids"][0].tolist())
        return inputs, {"encoder": (words, words)}

    def split_line(self, line: str) -> tuple[str, ...]:
        """A line of input: one sentence, or for pair tasks two separated by a tab."""
        if not self._has_pairs():
            return (line,)
        first, tab, second = line.partition("\t")
        if not tab:
            raise ValueError(f"this model reads sentence pairs: 'first<TAB>second', got {line!r}")
        return first, second

    def length(self, example: Encoded) -> int:
        return len(example.ids)

    def collate(self, examples: Sequence[Encoded]) -> Batch:
        ids, mask = pad_batch([e.ids for e in examples], self.tokenizer().pad_id)
        inputs = {"input_ids": ids, "attention_mask": mask}
        if self._has_pairs():
            inputs["token_type_ids"], _ = pad_batch([e.segments for e in examples], 0)
        dtype = torch.float32 if self.regression else torch.long
        targets = torch.tensor([e.target for e in examples], dtype=dtype)
        return Batch(inputs, targets, int(mask.sum()))

    def accumulate(self, totals: dict[str, Any], logits: Tensor, targets: Tensor) -> None:
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


class RegressionTask(ClassificationTask):
    """The same encoder and pooling with a regression head: one value per input, mean
    squared error, Pearson and Spearman correlation."""

    name = "regression"
    head = "regression"
    metric = "pearson"
    regression = True

    def __init__(self, recipe: Recipe) -> None:
        super().__init__(recipe)
        if recipe.train.rdrop:
            raise ValueError(
                f"[train] rdrop={recipe.train.rdrop}: R-Drop compares predicted class "
                "distributions, and regression predicts values"
            )

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        return F.mse_loss(self.logits(model, batch).squeeze(-1).float(), batch.targets)

    def predict(self, model: nn.Module, lines: Sequence[str]) -> list[float]:  # type: ignore[override]
        """The predicted value of each line (two tab-separated sentences for pair tasks)."""
        encoded = [self.encode_texts(self.split_line(line)) for line in lines]
        return [
            v for logits, _ in self.forward_in_order(model, encoded) for v in logits[:, 0].tolist()
        ]

    def predict_lines(self, model: nn.Module, lines: Sequence[str], **options: Any) -> list[str]:
        """The predicted value of each line."""
        return [f"{value:.4f}" for value in self.predict(model, lines)]

    def accumulate(self, totals: dict[str, Any], logits: Tensor, targets: Tensor) -> None:
        predictions = logits.squeeze(-1)
        loss = F.mse_loss(predictions, targets, reduction="sum")
        add(totals, loss_sum=loss.item(), targets=len(targets))
        totals.setdefault("predictions", []).extend(predictions.tolist())
        totals.setdefault("gold", []).extend(targets.tolist())

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        mse = totals["loss_sum"] / max(totals["targets"], 1)
        return {"mse": mse, **correlations(totals["predictions"], totals["gold"])}
