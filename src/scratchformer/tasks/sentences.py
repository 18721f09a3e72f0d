"""What the encoder tasks over sentences and sentence pairs share (classification,
regression, similarity): their data -- TSV files or SST-2 and STS-B --, their tokenizer,
``[CLS] sentence [SEP]``, lines of input; and, for those that predict a value per input
rather than a class, reading, predicting and scoring values."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import Recipe
from ..data.batching import pad_batch
from ..data.readers import LabeledText, read_tsv
from ..data.registry import LabeledTextDataset, dataset_choice, named_dataset
from ..device import model_device
from ..errors import DataSettingsError
from ..metrics import correlations
from ..models.heads import pool
from ..predictions import CLASSIFY, Record
from .base import Batch, ExampleTask, add, per_line, warn_cut

SPECIALS = ("pad", "unk", "cls", "sep")


@dataclass(frozen=True)
class Value(Record):
    """The value predicted for a sentence or pair (a score)."""

    value: float

    def line(self) -> str:
        return f"{self.value:.4f}"


class SentenceTask(ExampleTask):
    """Base of the tasks that label sentences or sentence pairs with an encoder."""

    arch = "encoder"
    predicts = CLASSIFY
    target_dtype: ClassVar[torch.dtype] = torch.long
    """Of the targets in batches: class indices."""

    def read_labelled(
        self,
        split: str,
        path: str | None = None,
        *,
        labels: Sequence[str] | None = None,
        values: bool = False,
    ) -> list[LabeledText]:
        """The sentences (or pairs) of a split with their labels: from ``path`` or
        ``data.<split>``, a TSV file (``data.text_columns``, ``data.label_column``), else
        from ``data.dataset``. In files, ``labels`` are the classes allowed, and with
        ``values`` labels are numbers."""
        path = path or getattr(self.data, split, None)
        data = self.data
        if path is not None:
            if data.text_columns is None or data.label_column is None:
                raise DataSettingsError("a TSV file needs data.text_columns and data.label_column")
            return read_tsv(
                path,
                tuple(data.text_columns),
                data.label_column,
                header=data.header,
                labels=labels,
                regression=values,
            )
        dataset = named_dataset(data.dataset, LabeledTextDataset)
        if dataset is not None:
            return dataset.examples(split, data.root)
        raise DataSettingsError(
            f"no {split} data: set {dataset_choice(LabeledTextDataset)} or data.{split} "
            "to a TSV file (with data.text_columns and data.label_column)"
        )

    def prepare(self) -> None:
        self.learn_tokenizer(self.read("train"))

    def learn_tokenizer(self, examples: Sequence[LabeledText]) -> None:
        """The tokenizer, from the texts of the training examples."""
        texts = [text for example in examples for text in example.texts]
        self.tokenizers = {"tokenizer": self.train_tokenizer(texts, SPECIALS)}

    def _has_pairs(self) -> bool:
        columns = self.data.text_columns
        if columns is not None and len(columns) == 2:
            return True
        dataset = named_dataset(self.data.dataset, LabeledTextDataset)
        return dataset is not None and dataset.pairs

    def sentence_ids(self, text: str) -> list[int]:
        """``[CLS] text [SEP]``, the text cut to fit ``data.max_len``."""
        return self.wrap(self.tokenizer().encode(text))

    def wrap(self, ids: Sequence[int]) -> list[int]:
        """``[CLS] ids [SEP]`` of a text's token ids, cut to fit ``data.max_len``."""
        return self.tokenizer().wrap(ids, max_len=self.data.max_len)

    def pieces(self, inputs: Sequence[Sequence[str]]) -> list[list[list[int]]]:
        """The token ids of each text of each input (one sentence or a pair), uncut: every
        text encoded in one call, which the library spreads over the cores."""
        ids = iter(self.tokenizer().encode_batch([text for texts in inputs for text in texts]))
        return [[next(ids) for _ in texts] for texts in inputs]

    def encode_inputs(
        self, inputs: Sequence[Sequence[str]], targets: Sequence[int | float]
    ) -> list[Any]:
        """The examples of ``inputs`` (one sentence or a pair each), with their targets."""
        pieces = self.pieces(inputs)
        return [self.encode_pieces(p, t) for p, t in zip(pieces, targets, strict=True)]

    @abstractmethod
    def encode_pieces(self, pieces: Sequence[list[int]], target: int | float = 0) -> Any:
        """The example of one sentence or a pair from their token ids (``pieces``, uncut),
        with its target."""

    def split_line(self, line: str) -> tuple[str, ...]:
        """A line of input: one sentence, or for pair tasks two separated by a tab."""
        if not self._has_pairs():
            return (line,)
        first, tab, second = line.partition("\t")
        if not tab:
            raise ValueError(f"this model reads sentence pairs: 'first<TAB>second', got {line!r}")
        return first, second

    def example(self, text: str) -> str:
        """``text``, or for pair tasks ``text<TAB>text``."""
        return f"{text}\t{text}" if self._has_pairs() else text

    def tokens_needed(self, pieces: Sequence[list[int]]) -> int:
        """The tokens of the longest input that texts of token ids ``pieces`` make, uncut:
        ``[CLS] text [SEP]`` for each sentence read alone."""
        return max(len(ids) + 2 for ids in pieces)

    @torch.no_grad()
    def embed(self, model: nn.Module, texts: Sequence[str], batch_size: int = 64) -> Tensor:
        """Unit-length sentence vectors ``(len(texts), d_model)``: each text read alone
        (``[CLS] text [SEP]``), its last hidden states pooled as the model's head pools
        them. For a similarity model, the dot product of two is the cosine it predicts for
        the pair; for a classifier, the vector its head reads."""
        device = model_device(model)
        vectors = []
        for start in range(0, len(texts), batch_size):
            sentences = [self.sentence_ids(text) for text in texts[start : start + batch_size]]
            ids, mask = pad_batch(sentences, self.tokenizer().pad_id)
            ids, mask = ids.to(device), mask.to(device)
            hidden, _ = model.encode(ids, mask)
            vectors.append(F.normalize(pool(hidden, mask, model.config.pooling).float(), dim=-1))
        return torch.cat(vectors).cpu()

    def line_logits(
        self, model: nn.Module, lines: Sequence[str], progress: bool = False
    ) -> Iterator[Tensor]:
        """The model's logits (on the CPU) for lines of input, batch by batch, in order;
        lines longer than ``data.max_len`` tokens are cut, with a warning."""
        pieces = self.pieces(list(per_line(lines, self.split_line)))
        limit = self.data.max_len
        warn_cut([i + 1 for i, p in enumerate(pieces) if self.tokens_needed(p) > limit], limit)
        encoded = [self.encode_pieces(p) for p in pieces]
        for logits, _ in self.forward_in_order(model, encoded, progress=progress):
            yield logits


class ValueTask(SentenceTask):
    """Base of the sentence tasks that predict a value per input (a score), not a class:
    Pearson and Spearman correlation with the gold values."""

    metric = "pearson"
    higher_is_better = True
    target_dtype = torch.float32

    def __init__(self, recipe: Recipe) -> None:
        super().__init__(recipe)
        if recipe.train.rdrop:
            raise ValueError(
                f"[train] rdrop={recipe.train.rdrop}: R-Drop compares predicted class "
                f"distributions, and {self.name} predicts values"
            )

    def read(self, split: str, path: str | None = None) -> list[LabeledText]:
        return self.read_labelled(split, path, values=True)

    def encode(self, raw: Sequence[LabeledText]) -> list[Any]:
        return self.encode_inputs([e.texts for e in raw], [float(e.label) for e in raw])

    def records(self, model: nn.Module, inputs: list[str], *, progress: bool) -> list[Value]:
        """The predicted value of each text (two tab-separated sentences for pair tasks)."""
        return [
            Value(value)
            for logits in self.line_logits(model, inputs, progress)
            for value in logits[:, 0].tolist()
        ]

    def accumulate(self, totals: dict[str, Any], logits: Tensor, batch: Batch) -> None:
        targets = batch.targets
        add(totals, targets=len(targets))
        totals.setdefault("predictions", []).extend(logits.squeeze(-1).tolist())
        totals.setdefault("gold", []).extend(targets.tolist())

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        return correlations(totals["predictions"], totals["gold"])
