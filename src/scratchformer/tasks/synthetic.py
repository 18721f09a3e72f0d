"""The synthetic sequence task: copy or reverse strings of digits. It needs no files, so
it serves the demo and the tests; a model that learns it shows that the whole pipeline
(masks, shifting, cross-attention, decoding) is right."""

from __future__ import annotations

import random
from typing import Any

import torch
from torch import Tensor

from ..nn.loss import IGNORE_INDEX
from .base import Batch, add, register_task
from .translation import TranslationTask

OPERATIONS = {"copy": lambda s: s, "reverse": lambda s: s[::-1]}
SPLIT_SEEDS = {"train": 0, "val": 1, "test": 2}


def digit_pairs(
    operation: str, count: int, min_digits: int, max_digits: int, seed: int
) -> list[tuple[str, str]]:
    """``count`` random digit strings and their copies (or reversals)."""
    if operation not in OPERATIONS:
        raise ValueError(f"data.dataset={operation!r} must be one of {', '.join(OPERATIONS)}")
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        digits = "".join(rng.choices("0123456789", k=rng.randint(min_digits, max_digits)))
        pairs.append((digits, OPERATIONS[operation](digits)))
    return pairs


@register_task
class SyntheticTask(TranslationTask):
    """Translation of digit strings into their copy or reversal, with a char vocabulary;
    the metric is exact match of whole sequences."""

    name = "synthetic"
    metric = "exact_match"
    higher_is_better = True

    def read(self, split: str, path: str | None = None) -> list[tuple[str, str]]:
        if path is not None or getattr(self.data, split, None) is not None:
            return super().read(split, path)
        if split not in SPLIT_SEEDS:
            raise ValueError(f"split={split!r} must be one of {', '.join(SPLIT_SEEDS)}")
        data = self.data
        count = data.synthetic.train_size if split == "train" else data.synthetic.val_size
        pairs = digit_pairs(
            data.dataset or "copy",
            count,
            data.synthetic.min_digits,
            data.synthetic.max_digits,
            seed=self.train_config.seed * 10 + SPLIT_SEEDS[split],
        )
        if split == "train":
            return pairs
        seen = {source for source, _ in self.read("train")}
        return [pair for pair in pairs if pair[0] not in seen]  # held out: unseen in training

    def accumulate(self, totals: dict[str, Any], logits: Tensor, batch: Batch) -> None:
        targets = batch.targets
        """Token sums, plus sequences whose every target is predicted: under teacher forcing
        that is exactly when greedy decoding reproduces the target."""
        super().accumulate(totals, logits, batch)
        right = (logits.argmax(-1) == targets) | (targets == IGNORE_INDEX)
        add(totals, sequences=targets.shape[0], exact=torch.all(right, dim=-1).sum().item())

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        return {**super().summarize(totals), "exact_match": totals["exact"] / totals["sequences"]}
