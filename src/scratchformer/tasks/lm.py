"""Language modelling: predict the next token of a text (decoder-only model)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor

from ..data.batching import lm_batch, lm_eval_blocks
from ..data.readers import iter_lines
from ..data.registry import TextDataset, dataset_choice, named_dataset
from ..data.tokenizer import Tokenizer
from ..nn.loss import IGNORE_INDEX
from ..predictions import GENERATE
from .base import Batch, TokenLabels, register_task
from .corpus import CorpusTask

LN_2 = math.log(2)


@register_task
class LanguageModelTask(CorpusTask):
    """A text becomes one token stream; training samples random ``block_size`` windows
    (as nanoGPT does), evaluation walks the validation stream in consecutive blocks.

    The text is a named dataset's or the recipe's files, line by line; or, with
    ``data.pretraining.corpus``, the pretraining tasks' corpus of named datasets' training
    text, each document followed by the eos token (so that a model learns where a text
    ends, as a chat model must), its held-out slice for validation.
    Streams are written to token files (in a temporary folder of the user cache) and
    memory-mapped: text files are read line by line, so corpora larger than memory work.
    """

    name = "lm"
    arch = "decoder"
    loss_in_forward = True
    metric = "loss"
    higher_is_better = False
    predicts = GENERATE

    def lines(self, split: str, path: str | None = None) -> Iterable[str]:
        """The text of a split, line by line with newlines: a named corpus, the recipe's
        file, or ``path`` (files are streamed, not read whole)."""
        path = path or getattr(self.data, split, None)
        if path is not None:
            return iter_lines(path)
        dataset = named_dataset(self.data.dataset, TextDataset)
        if dataset is not None:
            return dataset.text(split, root=self.data.root).splitlines(keepends=True)
        raise ValueError(
            f"no {split} text: set {dataset_choice(TextDataset)} or data.{split} = FILE"
        )

    def documents(self, split: str, path: str | None = None) -> Iterable[str]:
        """The corpus's documents (``data.pretraining.corpus``), else :meth:`lines`."""
        if self.data.pretraining.corpus and path is None:
            return super().documents(split)
        return self.lines(split, path)

    def separator(self) -> list[int]:
        """The eos token after each document of a corpus; lines run on."""
        eos = self.tokenizer().eos_id
        return [eos] if self.data.pretraining.corpus and eos is not None else []

    def prepare(self) -> None:
        specials = ("unk",) if self.data.tokenizer == "char" else ("unk", "eos")
        self.tokenizers = {"tokenizer": self.train_tokenizer(self.documents("train"), specials)}

    def model_sizes(self) -> dict[str, Any]:
        return {"vocab_size": self.tokenizer().vocab_size}

    def global_batch(self, index: int, parts: int) -> Batch:
        generator = torch.Generator().manual_seed(self.train_config.seed * 1_000_003 + index)
        x, y = lm_batch(
            self.stream("train"),
            self.train_config.batch_size * parts,
            self.data.lm.block_size,
            generator,
        )
        return Batch({"input_ids": x}, y, x.numel())

    def eval_batches(self, split: str, path: str | None = None) -> Iterator[Batch]:
        for x, y in lm_eval_blocks(
            self.stream(split, path), self.train_config.batch_size, self.data.lm.block_size
        ):
            yield Batch({"input_ids": x}, y, x.numel())

    def accumulate(self, totals: dict[str, Any], logits: Tensor, batch: Batch) -> None:
        """The base sums, and the scored targets in order (for :meth:`summarize`'s bytes)."""
        super().accumulate(totals, logits, batch)
        targets = batch.targets[batch.targets != IGNORE_INDEX]
        totals.setdefault("target_ids", []).extend(targets.tolist())

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        """The base metrics, and ``bits_per_byte``: the summed loss in bits over the UTF-8
        bytes of the scored targets' text, a measure that does not depend on the
        tokenizer (lm-evaluation-harness reports it for rolling log-likelihoods)."""
        metrics = super().summarize(totals)
        text = self.tokenizer().decode(totals["target_ids"])
        metrics["bits_per_byte"] = totals["loss_sum"] / (LN_2 * max(len(text.encode()), 1))
        return metrics

    def attention_inputs(self, text: str) -> tuple[dict[str, Tensor], TokenLabels]:
        """The tokens of ``text``, at most as many as the model reads in training."""
        limit = min(self.data.lm.block_size, self.recipe.model.max_len)
        return text_attention_inputs(self.tokenizer(), text, limit)


def text_attention_inputs(
    tokenizer: Tokenizer, text: str, limit: int
) -> tuple[dict[str, Tensor], TokenLabels]:
    """A language model's inputs of ``text`` alone, its first ``limit`` tokens (a warning
    if it has more), and the labels of its tokens."""
    ids = tokenizer.encode(text)
    if len(ids) > limit:
        warnings.warn(
            f"the text has {len(ids)} tokens: the model sees its first {limit}", stacklevel=5
        )
        ids = ids[:limit]
    labels = tokenizer.labels(ids)
    return {"input_ids": torch.tensor([ids])}, {"decoder": (labels, labels)}
