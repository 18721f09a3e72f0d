"""Semantic similarity of sentence pairs with a bi-encoder: each sentence is encoded on its
own, and the cosine of the two sentence vectors is the prediction (Sentence-BERT).

Against the cross-encoder of :class:`~.classification.RegressionTask` (both sentences in one
input), the bi-encoder starts from a useful place -- the mean vectors of two sentences that
share words are close even before training -- and gives sentence vectors that can be
stored and compared. It learns with CoSENT (Su, 2022): only the order of the gold scores
counts, so the cosine need not be mapped to their scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..config import Recipe
from ..data.batching import pad_batch
from ..data.registry import LabeledTextDataset, dataset_choice
from .base import Attentions, Batch, TokenLabels, register_task
from .sentences import ValueTask

COSENT_SCALE = 20.0
"""How sharply CoSENT punishes a pair ranked the wrong way (the paper's lambda)."""


@dataclass(frozen=True)
class EncodedPair:
    """``[CLS] a [SEP]`` and ``[CLS] b [SEP]`` token ids, and the gold score."""

    first: list[int]
    second: list[int]
    target: float


def cosent_loss(similarities: Tensor, targets: Tensor, scale: float = COSENT_SCALE) -> Tensor:
    """``log(1 + sum exp(scale * (s_j - s_i)))`` over the pairs ``(i, j)`` of the batch with
    ``targets[i] > targets[j]``: every pair the similarities ``s`` rank the wrong way costs,
    the more the wronger."""
    differences = scale * (similarities[None, :] - similarities[:, None])  # [i, j]: s_j - s_i
    ranked = targets[:, None] > targets[None, :]
    differences = differences.masked_fill(~ranked, float("-inf")).flatten()
    return torch.cat([differences.new_zeros(1), differences]).logsumexp(0)


@register_task
class SimilarityTask(ValueTask):
    """Sentence pairs -> the encoder, a sentence at a time -> mean-pooled vectors -> their
    cosine; CoSENT loss; Pearson and Spearman correlation with the gold scores."""

    name = "similarity"
    head = "similarity"

    def __init__(self, recipe: Recipe) -> None:
        super().__init__(recipe)
        if not self._has_pairs():
            raise ValueError(
                "the similarity task compares sentence pairs: set "
                f"{dataset_choice(LabeledTextDataset, lambda dataset: dataset.pairs)} or "
                "two data.text_columns"
            )

    def model_sizes(self) -> dict[str, Any]:
        return {
            "vocab_size": self.tokenizer().vocab_size,
            "num_labels": 1,
            "type_vocab_size": self.recipe.model.type_vocab_size,  # sentences go in alone
        }

    def encode_pieces(self, pieces: Sequence[list[int]], target: int | float = 0) -> EncodedPair:
        """Each sentence of the pair as ``[CLS] text [SEP]``."""
        first, second = pieces
        return EncodedPair(self.wrap(first), self.wrap(second), float(target))

    def attention_inputs(self, text: str) -> tuple[dict[str, Tensor], TokenLabels]:
        """One sentence: the bi-encoder reads each sentence of a pair alone."""
        ids = self.sentence_ids(text)
        words = self.tokenizer().labels(ids)
        return {"input_ids": torch.tensor([ids])}, {"encoder": (words, words)}

    def attend(self, model: nn.Module, inputs: dict[str, Tensor]) -> Attentions:
        """Through the encoder alone: the head compares the sentences of pairs."""
        _, weights = model.encode(**inputs, need_weights=True)
        return {"encoder": weights}

    def length(self, example: EncodedPair) -> int:
        return 2 * max(len(example.first), len(example.second))

    def collate(self, examples: Sequence[EncodedPair]) -> Batch:
        """``input_ids`` and ``attention_mask`` of shape ``(pairs, 2, seq)``: a batch's rows
        are pairs, so that it slices (processes, accumulation) as other batches do."""
        sentences = [ids for e in examples for ids in (e.first, e.second)]
        ids, mask = pad_batch(sentences, self.tokenizer().pad_id)
        inputs = {
            "input_ids": ids.view(len(examples), 2, -1),
            "attention_mask": mask.view(len(examples), 2, -1),
        }
        targets = torch.tensor([e.target for e in examples], dtype=self.target_dtype)
        return Batch(inputs, targets, int(mask.sum()))

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        """The model's cosines: each pair's two sentences go in as rows ``2i``, ``2i + 1``."""
        return model(**{k: v.flatten(0, 1) for k, v in batch.inputs.items()}).logits

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        return cosent_loss(self.logits(model, batch).squeeze(-1).float(), batch.targets)
