"""Token classification (named-entity recognition): one tag per word, predicted on the
word's first sub-word, decoded as a valid IOB2 sequence, scored by entity-level F1."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from ..data.batching import pad_batch
from ..data.readers import DataError, TaggedSentence, read_conll
from ..data.registry import TaggedSentenceDataset, dataset_choice, named_dataset
from ..errors import DataSettingsError
from ..metrics import entity_scores
from ..nn.loss import IGNORE_INDEX
from ..predictions import TAG, Record
from .base import Batch, ExampleTask, TokenLabels, register_task
from .tag_scheme import best_valid_tags, iob2_transitions

SPECIALS = ("pad", "unk", "cls", "sep")

Tagged = tuple[list[int], list[int]]
"""Sub-word ids; per sub-word the tag id on a word's first piece, else IGNORE_INDEX."""


@dataclass(frozen=True)
class Tags(Record):
    """The words of a text (split on whitespace) and their tags."""

    words: list[str]
    tags: list[str]

    def line(self) -> str:
        """A ``word tag`` line each, newline included, as in CoNLL files."""
        return "".join(f"{word} {tag}\n" for word, tag in zip(self.words, self.tags, strict=True))


@register_task
class TaggingTask(ExampleTask):
    """Words -> sub-words -> encoder -> a tag distribution at every position. The loss and
    the metrics count each word once, at its first sub-word."""

    name = "tagging"
    arch = "encoder"
    head = "token_classification"
    metric = "entity_f1"
    higher_is_better = True
    predicts = TAG

    def read(self, split: str, path: str | None = None) -> list[TaggedSentence]:
        path = path or getattr(self.data, split, None)
        if path is not None:
            sentences = read_conll(path)
        elif (dataset := named_dataset(self.data.dataset, TaggedSentenceDataset)) is not None:
            sentences = dataset.examples(split, self.data.root)
        else:
            raise DataSettingsError(
                f"no {split} data: set {dataset_choice(TaggedSentenceDataset)} or "
                f"data.{split} = FILE (CoNLL)"
            )
        if split != "train" or self.data.labels is not None:
            self._check_tags(sentences, path)
        return sentences

    def _check_tags(self, sentences: Sequence[TaggedSentence], path: str | None) -> None:
        known = set(self.labels())
        for sentence in sentences:
            for offset, tag in enumerate(sentence.tags):
                if tag not in known:
                    raise DataError.at(
                        path or f"{self.data.dataset} data",
                        sentence.line + offset,
                        f"tag {tag!r} is not one of {', '.join(self.labels())}",
                    )

    def prepare(self) -> None:
        sentences = self.read("train")
        texts = [" ".join(sentence.tokens) for sentence in sentences]
        self.tokenizers = {"tokenizer": self.train_tokenizer(texts, SPECIALS)}
        if self.data.labels is None:
            self.data.labels = sorted({tag for s in sentences for tag in s.tags})

    def model_sizes(self) -> dict[str, Any]:
        return {"vocab_size": self.tokenizer().vocab_size, "num_labels": len(self.labels())}

    def encode(self, raw: Sequence[TaggedSentence]) -> list[Tagged]:
        index = {tag: i for i, tag in enumerate(self.labels())}
        return [self.encode_words(s.tokens, [index[tag] for tag in s.tags]) for s in raw]

    def encode_words(self, words: Sequence[str], tags: Sequence[int] | None = None) -> Tagged:
        """Sub-word ids of the words, and targets: a word's tag id (or 0 when ``tags`` is
        not given) on its first sub-word, IGNORE_INDEX elsewhere; at most ``data.max_len``."""
        ids, word_of = self.tokenizer().encode_words(words)
        targets = [
            (0 if tags is None else tags[word])
            if i == 0 or word_of[i - 1] != word
            else IGNORE_INDEX
            for i, word in enumerate(word_of)
        ]
        return ids[: self.data.max_len], targets[: self.data.max_len]

    def tag(
        self, model: nn.Module, sentences: Sequence[Sequence[str]], progress: bool = False
    ) -> list[list[str]]:
        """The tag of every word of every sentence. Words cut off by ``data.max_len`` get
        ``O``, with a warning."""
        encoded = [self.encode_words(words) for words in sentences]
        cut = sum(len(ids) >= self.data.max_len for ids, _ in encoded)
        if cut:
            warnings.warn(
                f"{cut} sentence(s) longer than {self.data.max_len} sub-words: "
                "their last words are tagged O",
                stacklevel=2,
            )
        tags = [
            tagged
            for logits, batch in self.forward_in_order(model, encoded, progress=progress)
            for tagged in self.word_tags(logits, batch.targets)
        ]
        return [
            tagged + ["O"] * (len(words) - len(tagged))
            for words, tagged in zip(sentences, tags, strict=True)
        ]

    def records(self, model: nn.Module, inputs: list[str], *, progress: bool) -> list[Tags]:
        """The words of each text, split on whitespace, with their tags."""
        sentences = [text.split() for text in inputs]
        tags = self.tag(model, sentences, progress)
        return [Tags(*tagged) for tagged in zip(sentences, tags, strict=True)]

    def attention_inputs(self, text: str) -> tuple[dict[str, Tensor], TokenLabels]:
        """The words of ``text``, split on whitespace, as sub-words."""
        inputs = self.collate([self.encode_words(text.split())]).inputs
        pieces = self.tokenizer().labels(inputs["input_ids"][0].tolist())
        return inputs, {"encoder": (pieces, pieces)}

    def word_tags(self, logits: Tensor, targets: Tensor) -> list[list[str]]:
        """The predicted tags of the words of a batch of sentences, from the logits
        ``(sentences, pieces, tags)`` of their first sub-words (where ``targets`` is not
        IGNORE_INDEX): with ``data.tagging.tag_scheme = "iob2"`` the most likely valid IOB2
        sequences, else each word's most likely tag."""
        names, logits = self.labels(), logits.float().cpu()  # Viterbi: small sequential steps
        first = targets.cpu() != IGNORE_INDEX
        lengths = first.sum(1)
        order = first.int().argsort(dim=1, descending=True, stable=True)  # first pieces in front
        order = order[:, : int(lengths.max()), None]
        word_logits = logits.gather(1, order.expand(-1, -1, logits.shape[-1]))
        if self.data.tagging.tag_scheme == "iob2":
            allowed = iob2_transitions(tuple(names))
            ids = best_valid_tags(word_logits.log_softmax(-1), lengths, allowed)
        else:
            rows = word_logits.argmax(-1).tolist()
            ids = [row[:length] for row, length in zip(rows, lengths.tolist(), strict=True)]
        return [[names[i] for i in row] for row in ids]

    def length(self, example: Tagged) -> int:
        return len(example[0])

    def collate(self, examples: Sequence[Tagged]) -> Batch:
        ids, mask = pad_batch([ids for ids, _ in examples], self.tokenizer().pad_id)
        targets, _ = pad_batch([targets for _, targets in examples], IGNORE_INDEX)
        return Batch({"input_ids": ids, "attention_mask": mask}, targets, int(mask.sum()))

    def accumulate(self, totals: dict[str, Any], logits: Tensor, batch: Batch) -> None:
        targets = batch.targets
        super().accumulate(totals, logits, batch)
        names = self.labels()
        gold = [[names[i] for i in row[row != IGNORE_INDEX].tolist()] for row in targets]
        totals.setdefault("gold", []).extend(gold)
        totals.setdefault("predicted", []).extend(self.word_tags(logits, targets))

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        return {**super().summarize(totals), **entity_scores(totals["gold"], totals["predicted"])}
