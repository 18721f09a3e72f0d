"""LoRA adapters out in PEFT's layout: ``adapter_config.json`` and
``adapter_model.safetensors``, which ``peft.PeftModel.from_pretrained(base, directory)``
loads onto the Hugging Face checkpoint of the adapted model's base (as
:func:`~scratchformer.interop.hf.save_pretrained` writes it: a ``BertModel``, a
``LlamaForCausalLM``, ...).

Our fused ``qkv_proj`` holds one adapter per query, key and value (see
:mod:`scratchformer.nn.lora`), which are exactly PEFT's adapters of the checkpoint's
separate projections. A task head is not part of the base checkpoint, so it is not exported;
nor are adapters of maps that the checkpoint stores transposed (GPT-2's ``Conv1D``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from torch import Tensor, nn

from ..io import atomic_write_json, save_tensors
from ..nn import LoRALinear
from .families import family_for

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_FILE = "adapter_model.safetensors"
PREFIX = "base_model.model."
"""What PEFT puts before the base model's module names."""


def save_adapter(model: nn.Module, path: str | Path) -> None:
    """Write the LoRA adapters of ``model`` (adapted by
    :func:`~scratchformer.training.lora.apply_lora`) as a PEFT adapter directory. A model
    no Hugging Face family expresses, or an adapted map that the family's checkpoint does
    not hold as a plain linear map, raises ``ValueError`` before anything is written."""
    base = dataclasses.replace(model.config, head=None)  # type: ignore[arg-type]
    table = family_for(base).table(base)
    tensors: dict[str, Tensor] = {}
    targets: set[str] = set()
    settings: set[tuple[int, float, float]] = set()
    for name, module in model.named_modules():
        if not isinstance(module, LoRALinear):
            continue
        source = table.get(f"{name}.weight")
        if source is None or source.transposed or len(source.names) != len(module.parts):
            raise ValueError(f"{name} has no plain linear map in PEFT's layout to adapt")
        for weight, (a, b) in zip(source.names, module.adapters(), strict=True):
            theirs = PREFIX + weight.removesuffix(".weight")
            tensors[f"{theirs}.lora_A.weight"] = a.detach().contiguous()
            tensors[f"{theirs}.lora_B.weight"] = b.detach().contiguous()
            targets.add(weight.removesuffix(".weight"))  # whole names: BERT has many "dense"
        settings.add((module.rank, module.scale, module.lora_dropout.p))
    if not tensors:
        raise ValueError(f"the {type(model).__name__} has no LoRA adapters to export")
    ((rank, scale, dropout),) = settings  # apply_lora adapts every map alike
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    save_tensors(directory / ADAPTER_FILE, tensors, {"format": "pt"})
    atomic_write_json(
        directory / ADAPTER_CONFIG_FILE,
        {
            "peft_type": "LORA",
            "task_type": None,
            "r": rank,
            "lora_alpha": rank * scale,
            "lora_dropout": dropout,
            "target_modules": sorted(targets),
            "bias": "none",
            "fan_in_fan_out": False,
            "base_model_name_or_path": None,
            "inference_mode": True,
        },
    )
