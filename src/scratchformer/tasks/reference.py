"""The frozen reference of preference training: the model as training started, scoring the
same responses as the policy (:mod:`scratchformer.nn.preference`).

When only LoRA adapters train and they change nothing yet, the reference is the policy
itself with its adapters switched off (:func:`~scratchformer.nn.lora.adapters_disabled`):
no second copy of the weights. Otherwise it is a frozen copy of the starting weights.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..nn.lora import LoRALinear, adapters_disabled
from ..nn.preference import sequence_logprobs


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
