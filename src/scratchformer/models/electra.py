"""ELECTRA's replaced-token detection (Clark et al., 2020), as an encoder's ``rtd`` head.

A small generator -- an encoder of ``generator_layers`` layers that reads the model's own
embeddings, with BERT's masked-LM head tied to them -- predicts the masked tokens, and a
token sampled from its prediction takes each masked place. The model itself (the
discriminator) then reads the corrupted text and tells, at every token, whether it is the
original or a replacement. The discriminator learns from every token rather than the
masked 15%, which makes a small encoder learn more from the same compute than by masked LM.
The generator lives in the head, so a fine-tune, which drops a pretraining head, keeps the
discriminator alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..config import ModelConfig
from ..nn import Linear
from ..nn.feedforward import ACTIVATIONS
from ..nn.loss import IGNORE_INDEX
from .encoder import Encoder
from .heads import HEADS, Masked, MaskedLMHead, PretrainedEncoder, PretrainingHead


@dataclass(frozen=True)
class Detection:
    """One pass of generator and discriminator over a masked batch."""

    generator_logits: Tensor
    """``(masked, vocab)``: the generator's prediction at each masked position."""
    targets: Tensor
    """``(masked,)``: the original tokens there."""
    replaced_logits: Tensor
    """``(batch, seq)``: the discriminator's logit that a token is a replacement."""
    replaced: Tensor
    """``(batch, seq)``: whether it is (a sample equal to the original is not; padding
    never is)."""
    counted: Tensor
    """``(batch, seq)``: the real tokens, whose detection counts."""
    hidden: Tensor
    """The discriminator's last hidden states."""

    def losses(
        self, label_smoothing: float = 0.0, reduction: str = "mean"
    ) -> tuple[Tensor, Tensor]:
        """The generator's masked-LM cross-entropy over the masked tokens, and the binary
        cross-entropy of the detection over the counted ones (``reduction``: their mean or
        sum)."""
        generator = F.cross_entropy(
            self.generator_logits,
            self.targets,
            label_smoothing=label_smoothing,
            reduction=reduction,
        )
        detection = F.binary_cross_entropy_with_logits(
            self.replaced_logits[self.counted].float(),
            self.replaced[self.counted].float(),
            reduction=reduction,
        )
        return generator, detection

    def loss(self, discriminator_weight: float, label_smoothing: float = 0.0) -> Tensor:
        """ELECTRA's objective: the generator's mean loss plus ``discriminator_weight``
        times the detection's."""
        generator, detection = self.losses(label_smoothing)
        return generator + discriminator_weight * detection


def sample(logits: Tensor, draws: Tensor) -> Tensor:
    """A token from each row of float ``logits`` (softmax probabilities), picked by the uniform
    number in ``draws`` (``(rows,)``, in [0, 1)) through the inverse of the cumulative
    distribution: the same draws give the same tokens."""
    cumulative = logits.softmax(-1).cumsum(-1)
    picked = torch.searchsorted(cumulative, (draws * cumulative[:, -1]).unsqueeze(1))
    return picked.squeeze(1).clamp(max=logits.shape[-1] - 1)


class ReplacedTokenHead(PretrainingHead):
    """The generator (encoder layers and a masked-LM head) and the discriminator's head: a
    dense layer, the activation and one logit a token (ELECTRA's)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        generator = dataclasses.replace(config, n_layers=config.rtd.generator_layers, head="mlm")
        self.generator = Encoder(generator)
        self.generator_head = MaskedLMHead(generator)
        self.dense = Linear(config.d_model, config.d_model)
        self.activation = ACTIVATIONS[config.activation]
        self.proj = Linear(config.d_model, 1)
        self.discriminator_weight = config.rtd.discriminator_weight

    def tie(self, weight: torch.nn.Parameter) -> None:
        self.generator_head.tie(weight)

    def forward(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """The logit that each token is a replacement, ``(batch, seq)``."""
        return self.proj(self.activation(self.dense(hidden))).squeeze(-1)

    def detect(self, model: PretrainedEncoder, masked: Masked) -> Detection:
        """The generator fills ``masked``'s masked positions with its samples (picked by
        ``masked.replacement_draws``); the model reads the result and detects them."""
        if masked.replacement_draws is None:
            raise ValueError("the rtd head needs replacement_draws: one uniform number a token")
        chosen = masked.labels != IGNORE_INDEX
        embedded = model.embedding(masked.input_ids, segments=masked.token_type_ids)
        generated, _ = self.generator(embedded, masked.attention_mask)
        logits = self.generator_head(generated[chosen]).float()
        original = torch.where(chosen, masked.labels, masked.input_ids)
        samples = sample(logits.detach(), masked.replacement_draws[chosen])
        corrupted = original.masked_scatter(chosen, samples)
        hidden, _ = model.encode(
            corrupted, masked.attention_mask, token_type_ids=masked.token_type_ids
        )
        counted = (
            torch.ones_like(chosen)
            if masked.attention_mask is None
            else masked.attention_mask.bool()
        )
        return Detection(
            logits, original[chosen], self(hidden), corrupted != original, counted, hidden
        )

    def objective(
        self, model: PretrainedEncoder, masked: Masked, label_smoothing: float = 0.0
    ) -> tuple[Tensor, Tensor]:
        """ELECTRA's loss (:meth:`Detection.loss`)."""
        detection = self.detect(model, masked)
        return detection.loss(self.discriminator_weight, label_smoothing), detection.hidden


HEADS.add("rtd", ReplacedTokenHead)
