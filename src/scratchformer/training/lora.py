"""LoRA fine-tuning of a whole model: adapt its target linear maps, freeze the rest, keep
only what trains, and fold the adapters back into plain weights.

An adapted model trains its adapters and, for an encoder, its task head (a new head is
random, so it must train); every other weight is its base's, frozen. Its state dict holds
those trained tensors only, so that the trainer's checkpoints and ``model.safetensors``
hold the adapter alone: the base is the run's ``train.init_from`` (or the initial weights
of ``train.seed``), rebuilt when the run is opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..config import TrainConfig
from ..nn import Attention, LoRALinear


def apply_lora(model: nn.Module, config: TrainConfig) -> nn.Module:
    """``model`` with each linear map named in ``config.lora_targets`` adapted in place
    (``config.lora_rank`` and the other ``lora_*`` settings; ``lora_A`` drawn from
    ``config.seed``) and everything else frozen but the task head; unchanged when
    ``config.lora_rank`` is ``None``. Returns ``model``."""
    if config.lora_rank is None:
        return model
    model.requires_grad_(False)
    generator = torch.Generator().manual_seed(config.seed)
    targets = set(config.lora_targets)
    adapted = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if name in targets and isinstance(child, nn.Linear):
                adapter = LoRALinear(
                    child,
                    config.lora_rank,
                    config.lora_alpha,
                    config.lora_dropout,
                    parts=_parts(parent, name),
                    generator=generator,
                )
                setattr(parent, name, adapter)
                adapted += 1
    if not adapted:
        raise ValueError(
            f"lora_targets={config.lora_targets!r} name no linear map of the {type(model).__name__}"
        )
    head = getattr(model, "head", None)
    if head is not None:
        head.requires_grad_(True)
    model.lora_state = frozenset(n for n, p in model.named_parameters() if p.requires_grad)
    model.lora_hook = model.register_state_dict_post_hook(_trained_only)
    return model


def _parts(parent: nn.Module, name: str) -> tuple[int, ...] | None:
    """The output parts of an attention's fused projection ``name``, each adapted apart
    (as the attention says: ``Attention.fused_parts``); else one part."""
    return parent.fused_parts.get(name) if isinstance(parent, Attention) else None


def _trained_only(
    module: nn.Module, state: dict[str, Any], prefix: str, metadata: Mapping[str, Any]
) -> None:
    """State-dict hook of an adapted model: drop its frozen base tensors."""
    kept = module.lora_state  # type: ignore[attr-defined]
    for key in [k for k in state if k.startswith(prefix) and k[len(prefix) :] not in kept]:
        del state[key]


def is_adapted(model: nn.Module) -> bool:
    """Whether :func:`apply_lora` adapted ``model`` (and it was not merged since)."""
    return hasattr(model, "lora_state")


@torch.no_grad()
def merge_lora(model: nn.Module) -> nn.Module:
    """``model`` with every adapted map replaced, in place, by the plain linear map of its
    merged weight ``W + B A * alpha / rank``: an ordinary model again (all weights in its
    state dict, all trainable), computing what the adapted one computes in eval mode."""
    if not is_adapted(model):
        raise ValueError(f"the {type(model).__name__} has no LoRA adapters to merge")
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, LoRALinear):
                setattr(parent, name, child.merged())
    model.lora_hook.remove()
    del model.lora_state, model.lora_hook
    return model.requires_grad_(True)
