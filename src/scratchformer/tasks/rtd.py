"""ELECTRA's replaced-token detection (:mod:`scratchformer.models.electra`) as a pretraining
task: the corpus, windows and masks of masked LM (:class:`~.mlm.MaskedLMTask`), and with
each batch one uniform number a token that picks the generator's samples, so that a resumed
run replaces the same tokens as an unbroken one. The metrics: the objective's loss, the
generator's masked-token accuracy, and how well the discriminator tells the replacements.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ..models.heads import Masked
from .base import Batch, add, register_task
from .mlm import MaskedLMTask


@register_task
class ReplacedTokenTask(MaskedLMTask):
    """Pretrain an encoder to tell original tokens from a small generator's replacements."""

    name = "rtd"
    head = "rtd"
    metric = "accuracy"
    """The generator's masked-token accuracy selects the kept weights: the objective's loss
    rises as a better generator makes replacements harder to tell, so it cannot."""
    higher_is_better = True
    predicts = None

    def masked(self, windows: np.ndarray, generator: torch.Generator) -> Batch:
        """Masked LM's rows and targets, and the draws of the generator's samples."""
        batch = super().masked(windows, generator)
        rows = batch.inputs["input_ids"]
        draws = torch.rand(rows.shape, generator=generator)
        return Batch({"input_ids": rows, "replacement_draws": draws}, batch.targets, batch.tokens)

    def score(self, totals: dict[str, Any], model: nn.Module, batch: Batch) -> None:
        detection = model.head.detect(model, Masked(labels=batch.targets, **batch.inputs))
        generator, detected = detection.losses(reduction="sum")
        counted, replaced = detection.counted, detection.replaced
        flagged = (detection.replaced_logits > 0) & counted
        add(
            totals,
            generator_sum=generator.item(),
            detection_sum=detected.item(),
            masked=len(detection.targets),
            correct=(detection.generator_logits.argmax(-1) == detection.targets).sum().item(),
            tokens=counted.sum().item(),
            replaced=replaced.sum().item(),
            flagged=flagged.sum().item(),
            caught=(flagged & replaced).sum().item(),
        )

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        """The objective's loss (as in training), each part of it, the generator's
        masked-token accuracy, the share of tokens replaced, and how the discriminator
        tells them: its accuracy over all tokens, and the precision and recall of the
        tokens it calls replaced."""
        masked, tokens = max(totals["masked"], 1), max(totals["tokens"], 1)
        generator, detection = totals["generator_sum"] / masked, totals["detection_sum"] / tokens
        caught, flagged, replaced = totals["caught"], totals["flagged"], totals["replaced"]
        wrong = (flagged - caught) + (replaced - caught)
        return {
            "loss": generator + self.recipe.model.rtd.discriminator_weight * detection,
            "generator_loss": generator,
            "detection_loss": detection,
            "accuracy": totals["correct"] / masked,
            "replaced": replaced / tokens,
            "detection_accuracy": 1.0 - wrong / tokens,
            "detection_precision": caught / max(flagged, 1),
            "detection_recall": caught / max(replaced, 1),
        }
