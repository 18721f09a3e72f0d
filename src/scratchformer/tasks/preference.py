"""What preference training (DPO) adds to a language model's task: the frozen reference,
and the loss of a batch of pairs (:mod:`scratchformer.nn.preference`).

The reference is the model as training started. When only LoRA adapters train and they
change nothing yet, it is the policy itself with its adapters switched off
(:func:`~scratchformer.nn.lora.adapters_disabled`): no second copy of the weights.
Otherwise it is a frozen copy of the starting weights.

A batch of pairs holds its inputs and targets as ``(pairs, 2, seq)``, the chosen response's
row before the rejected one's, so that slicing a batch into micro-batches or for processes
(:meth:`~scratchformer.tasks.base.Batch.slice`, which cuts the first dimension) keeps each
pair whole.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..nn.lora import LoRALinear, adapters_disabled
from ..nn.loss import IGNORE_INDEX
from ..nn.preference import PreferenceLoss, dpo_loss, sequence_logprobs
from .base import Batch


@dataclass(frozen=True)
class Reference:
    """The reference model and how it scores: in eval mode, without gradients."""

    model: nn.Module
    shared: bool
    """Whether ``model`` is the policy, scored with its adapters off (else a frozen copy)."""

    @torch.no_grad()
    def logprobs(self, inputs: dict[str, Tensor], targets: Tensor) -> Tensor:
        """The reference's log-probability of each row's ``targets`` given ``inputs`` (the
        model's keyword arguments), as :func:`sequence_logprobs` sums them."""
        if not self.shared:
            return sequence_logprobs(self.model(**inputs).logits, targets)
        was_training = self.model.training
        self.model.eval()
        try:
            with adapters_disabled(self.model):
                return sequence_logprobs(self.model(**inputs).logits, targets)
        finally:
            self.model.train(was_training)


def reference_for(policy: nn.Module) -> Reference:
    """The reference of ``policy`` as it is now, so to be made before training changes it
    (on resuming, from the starting model, before a checkpoint's weights are loaded into
    it). ``policy`` is the plain model, not a distributed or compiled wrapper of it."""
    if _adapters_only(policy):
        return Reference(policy, shared=True)
    return Reference(copy.deepcopy(policy).requires_grad_(False).eval(), shared=False)


def _adapters_only(model: nn.Module) -> bool:
    """Whether ``model`` with its adapters off is ``model`` as it is, and stays so while
    it trains: it has LoRA adapters, none changes its map yet (``lora_B`` is zero, as
    :func:`~scratchformer.training.lora.apply_lora` makes them), and nothing else trains."""
    layers = [module for module in model.modules() if isinstance(module, LoRALinear)]
    adapters = {id(p) for layer in layers for p in (layer.lora_A, layer.lora_B)}
    trained = [p for p in model.parameters() if p.requires_grad]
    return (
        bool(layers)
        and all(id(p) in adapters for p in trained)
        and not any(layer.lora_B.any() for layer in layers)
    )


def preference_loss(
    model: nn.Module, reference: Reference, batch: Batch, beta: float, sft_weight: float = 0.0
) -> PreferenceLoss:
    """DPO's loss of a batch of pairs (inputs and targets ``(pairs, 2, seq)``, targets
    ``IGNORE_INDEX`` but at the response tokens), with an SFT term of ``sft_weight``: the
    policy ``model`` and the ``reference`` each score both responses of every pair in one
    forward pass."""
    pairs = batch.targets.shape[0]
    inputs = {name: value.flatten(0, 1) for name, value in batch.inputs.items()}
    targets = batch.targets.flatten(0, 1)
    policy = sequence_logprobs(model(**inputs).logits, targets).view(pairs, 2)
    frozen = reference.logprobs(inputs, targets).view(pairs, 2)
    chosen_tokens = (batch.targets[:, 0] != IGNORE_INDEX).sum(-1)
    return dpo_loss(
        policy[:, 0], policy[:, 1], frozen[:, 0], frozen[:, 1], beta, sft_weight, chosen_tokens
    )
