"""Task heads on top of a stack's hidden states, and the encoder's heads by name
(:data:`HEADS`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from ..nn import Dropout, Embedding, Linear, init, linear_cross_entropy
from ..nn.feedforward import ACTIVATIONS
from ..nn.loss import IGNORE_INDEX
from ..nn.norm import NORMS
from ..registry import Registry


def pool(hidden: Tensor, attention_mask: Tensor | None, how: str = "mean") -> Tensor:
    """Sentence vector ``(batch, d_model)`` from ``(batch, seq, d_model)``.

    ``mean`` averages real tokens only (padding never leaks in); ``first`` takes position 0
    (the [CLS] token of BERT-style inputs).
    """
    if how == "first":
        return hidden[:, 0]
    if how != "mean":
        raise ValueError(f"pooling={how!r} must be mean or first")
    if attention_mask is None:
        return hidden.mean(dim=1)
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


class SequenceHead(nn.Module):
    """Pooling, dropout and a linear map to ``output_dim`` values: class logits for
    sequence classification, or the predicted values for regression."""

    def __init__(
        self, d_model: int, output_dim: int, pooling: str = "mean", dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.pooling = pooling
        self.dropout = Dropout(dropout)
        self.proj = Linear(d_model, output_dim)

    def forward(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        return self.proj(self.dropout(pool(hidden, attention_mask, self.pooling)))


class SimilarityHead(nn.Module):
    """The cosine similarity of two sentences' pooled vectors: a bi-encoder (Sentence-BERT),
    which encodes each sentence apart, so that sentence vectors can be kept and compared
    at will. Rows ``2i`` and ``2i + 1`` of the hidden states are pair ``i``; the output is
    ``(pairs, 1)``."""

    def __init__(self, pooling: str = "mean") -> None:
        super().__init__()
        self.pooling = pooling

    def forward(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        if hidden.shape[0] % 2:
            raise ValueError(
                f"the similarity head compares rows 2i and 2i + 1: an even number of rows, "
                f"not {hidden.shape[0]}"
            )
        vectors = pool(hidden, attention_mask, self.pooling)
        first, second = vectors.view(-1, 2, vectors.shape[-1]).unbind(1)
        return F.cosine_similarity(first, second, dim=-1)[:, None]


class Pooler(nn.Module):
    """BERT's pooler: a dense layer and tanh on the first token's hidden state, the sentence
    vector that BERT's next-sentence objective trained."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.dense = Linear(d_model, d_model)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class TokenClassificationHead(nn.Module):
    """Dropout and a linear map to tag logits at every position (NER)."""

    def __init__(self, d_model: int, num_labels: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = Dropout(dropout)
        self.proj = Linear(d_model, num_labels)

    def forward(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        return self.proj(self.dropout(hidden))


class SpanHead(nn.Module):
    """A linear map of every token to two logits: that the answer starts there, and that it
    ends there (extractive question answering; BERT's ``qa_outputs``). The output is
    ``(batch, seq, 2)``."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.proj = Linear(d_model, 2)

    def forward(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        return self.proj(hidden)


@dataclass(frozen=True)
class Masked:
    """A pretraining batch: ``input_ids`` with some tokens masked, ``labels`` the original
    tokens there (``IGNORE_INDEX`` elsewhere); ``replacement_draws``: uniform numbers that
    pick the ``rtd`` generator's samples (drawn with the batch, so that a resumed run
    replaces the same tokens)."""

    input_ids: Tensor
    labels: Tensor
    attention_mask: Tensor | None = None
    token_type_ids: Tensor | None = None
    replacement_draws: Tensor | None = None


class PretrainedEncoder(Protocol):
    """What a pretraining head's objective reads of the model it heads (an
    :class:`~.encoder.EncoderModel`, which imports this module): its embedding, and the
    encoder's pass."""

    embedding: Embedding

    def encode(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        need_weights: bool = False,
        token_type_ids: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor]]: ...


class PretrainingHead(nn.Module, ABC):
    """A head with an objective of its own on masked inputs (``mlm``, ``rtd``), whose
    vocabulary projection is tied to the token embedding (set by the model)."""

    @abstractmethod
    def tie(self, weight: nn.Parameter) -> None:
        """Share the token embedding's ``weight`` as the vocabulary projection."""

    @abstractmethod
    def objective(
        self, model: PretrainedEncoder, masked: Masked, label_smoothing: float = 0.0
    ) -> tuple[Tensor, Tensor]:
        """The pretraining loss of ``model`` (whose head this is) on ``masked``, and the
        last hidden states of the encoder's pass."""


class MaskedLMHead(PretrainingHead):
    """BERT's masked-language-model head: a dense layer, the activation and a norm (the
    "transform"), then vocabulary logits through a decoder whose weight is tied to the
    token embedding (set by the model), plus a bias of its own."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.dense = Linear(config.d_model, config.d_model)
        self.activation = ACTIVATIONS[config.activation]
        self.norm = NORMS[config.norm](config)
        self.weight = nn.Parameter(torch.empty(config.vocab_size, config.d_model))
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        init.normal_(self.weight, std=config.d_model**-0.5)

    def transform(self, hidden: Tensor) -> Tensor:
        return self.norm(self.activation(self.dense(hidden)))

    def forward(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Vocabulary logits at every position of ``hidden``."""
        return F.linear(self.transform(hidden), self.weight, self.bias)

    def tie(self, weight: nn.Parameter) -> None:
        self.weight = weight

    def objective(
        self, model: PretrainedEncoder, masked: Masked, label_smoothing: float = 0.0
    ) -> tuple[Tensor, Tensor]:
        """The masked tokens' mean cross-entropy (:meth:`loss`)."""
        hidden, _ = model.encode(
            masked.input_ids, masked.attention_mask, token_type_ids=masked.token_type_ids
        )
        return self.loss(hidden, masked.labels, label_smoothing), hidden

    def loss(self, hidden: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
        """Mean cross-entropy at the positions whose label is not ``IGNORE_INDEX`` (the
        masked ones): only they go through the head, and their logits are never formed
        whole (:func:`~scratchformer.nn.linear_cross_entropy`)."""
        counted = labels != IGNORE_INDEX
        return linear_cross_entropy(
            self.transform(hidden[counted]),
            self.weight,
            labels[counted],
            label_smoothing,
            bias=self.bias,
        )


HEADS: Registry[Callable[[ModelConfig], nn.Module]] = Registry("head")
"""``ModelConfig.head`` -> the head of an encoder built from the config."""


@HEADS.register("classification")
@HEADS.register("regression")
def sequence_head(config: ModelConfig) -> SequenceHead:
    return SequenceHead(config.d_model, config.num_labels, config.pooling, config.dropout)


@HEADS.register("similarity")
def similarity_head(config: ModelConfig) -> SimilarityHead:
    return SimilarityHead(config.pooling)


@HEADS.register("token_classification")
def token_classification_head(config: ModelConfig) -> TokenClassificationHead:
    return TokenClassificationHead(config.d_model, config.num_labels, config.dropout)


@HEADS.register("span")
def span_head(config: ModelConfig) -> SpanHead:
    return SpanHead(config.d_model)


HEADS.add("mlm", MaskedLMHead)


class LMHead(nn.Module):
    """Projection to vocabulary logits, without bias so that it can share (tie) its weight
    with the token embedding (paper sec. 3.4)."""

    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        init.normal_(self.weight, std=d_model**-0.5)

    def forward(self, hidden: Tensor) -> Tensor:
        return F.linear(hidden, self.weight)

    def loss(self, hidden: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
        """Mean cross-entropy of the logits against ``labels`` (-100: not counted), computed
        without forming the logits (:func:`~scratchformer.nn.linear_cross_entropy`)."""
        return linear_cross_entropy(hidden, self.weight, labels, label_smoothing)
