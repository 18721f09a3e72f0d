"""Quantization of a trained model for inference: every linear map with int8 weights.

:func:`quantize` replaces each linear map of a model (``torch.nn.Linear`` and ours, the
task heads and the LM head included) by a
:class:`~scratchformer.kernels.KernelQuantizedLinear` of its weight (a
:class:`~scratchformer.nn.QuantizedLinear` whose products take the project's kernels);
norms, embeddings and everything else keep their float weights. The model keeps its class,
its ``config`` and its forward, so decoding, beam search, translation and the tasks'
evaluation and predictions take it as they take the float model, and so does
``CompiledLM``. How the products are computed (int8 x int8 in float32 on an x86 CPU) is
:mod:`scratchformer.kernels.quantized`'s.

An LM head tied to the token embedding gets an int8 copy of the shared table, while the
embedding keeps its float rows: the head is read whole at every decoding step (a fifth of a
small GPT's weights), the embedding one row a token, so the head is where int8 pays, and
the looked-up rows stay exact.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ..config import QUANTIZATIONS
from ..kernels import KernelQuantizedLinear
from ..models import LMHead
from ..nn import LoRALinear, linear_cross_entropy
from ..nn.loss import IGNORE_INDEX
from ..nn.quantized import product_dtype


class QuantizedLMHead(KernelQuantizedLinear):
    """An :class:`~scratchformer.models.LMHead` with int8 weights: the logits, and the
    loss that a language model's forward computes from ``labels``, that of those logits."""

    def loss(self, hidden: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
        """The cross-entropy of the logits this head gives ``hidden``: of a few rows, in
        int8 products where they are (:meth:`~KernelQuantizedLinear.int8_product_for`), from
        the logits themselves; else with the dequantized weight, without forming them."""
        if self.int8_product_for(hidden, product_dtype(hidden)):
            logits = self(hidden).flatten(0, -2)
            return F.cross_entropy(
                logits, labels.flatten(), ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing
            )
        weight = self.dequantized(hidden.dtype)
        return linear_cross_entropy(hidden, weight, labels, label_smoothing)


def quantize(model: nn.Module, quantization: str = "int8") -> nn.Module:
    """``model`` with every linear map replaced, in place, by its weight-only
    ``quantization`` (``int8``: per output channel, symmetric; see
    :mod:`scratchformer.nn.quantized`); returns ``model`` (a linear map given alone comes
    back quantized). A map registered in several places stays one map; maps already
    quantized are left as they are.

    A model with LoRA adapters is refused, untouched: merge them first
    (``scratchformer.training.lora.merge_lora``, or ``scratchformer merge``)."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization={quantization!r} must be one of {', '.join(QUANTIZATIONS)}")
    if any(isinstance(module, LoRALinear) for module in model.modules()):
        raise ValueError(
            f"the {type(model).__name__} has LoRA adapters: merge them into its weights "
            "before quantizing (merge_lora, or scratchformer merge)"
        )
    replaced: dict[int, nn.Module] = {}
    for path, module in list(model.named_modules(remove_duplicate=False)):
        if id(module) not in replaced:
            if isinstance(module, nn.Linear):
                weight, bias = module.weight, module.bias
                replaced[id(module)] = KernelQuantizedLinear.from_weight(weight, bias)
            elif isinstance(module, LMHead):
                replaced[id(module)] = QuantizedLMHead.from_weight(module.weight)
            else:
                continue
        parent, _, name = path.rpartition(".")
        if name:
            setattr(model.get_submodule(parent), name, replaced[id(module)])
    return replaced.get(id(model), model)
