"""Low-rank adaptation (LoRA; Hu et al., 2021) of a linear map.

The pretrained weight ``W`` stays frozen; a trained update ``B A`` of rank ``r`` is added,
scaled by ``alpha / r``: ``y = x W^T + b + dropout(x) A^T B^T * alpha / r``. ``B`` starts at
zero, so the adapted map starts equal to the pretrained one; ``A`` is Kaiming-uniform, as in
the paper's code and PEFT.

A fused projection (our attention's ``qkv_proj``, whose output rows are the query's, the
key's and the value's side by side) may be adapted part by part: one ``(A, B)`` pair of
rank ``r`` per part of the output, stacked (``A`` holds the parts' rows one after another,
``B`` the parts' rows with their own ``r`` columns). The update is then block-diagonal in
the output parts: exactly separate rank-``r`` adapters of the query, key and value maps, as
PEFT holds them for a checkpoint with separate projections.

Within :func:`adapters_disabled`, an adapted model computes as its base alone: for
adapters that started at zero, the frozen model that training started from (preference
training's reference), with no second copy of its weights.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .dropout import Dropout
from .linear import Linear


class LoRALinear(Linear):
    """The linear map ``base`` (its ``weight`` and ``bias``, shared and frozen) plus a
    trained low-rank update ``lora_B @ lora_A * alpha / rank`` per part of the output
    (``parts``: the parts' widths, summing to ``out_features``; one part by default).
    ``generator`` draws ``lora_A`` (else the global random state).

    ``lora_A`` is ``(len(parts) * rank, in_features)``, ``lora_B`` ``(out_features, rank)``:
    rows ``[i r, (i + 1) r)`` of ``A`` and the rows of part ``i`` of ``B`` form part ``i``'s
    adapter. :meth:`merged` folds the update into a plain :class:`Linear`."""

    def __init__(
        self,
        base: nn.Linear,
        rank: int,
        alpha: float,
        dropout: float = 0.0,
        parts: Sequence[int] | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        nn.Module.__init__(self)  # the weight and bias are ``base``'s, not new ones
        parts = (base.out_features,) if parts is None else tuple(parts)
        if rank < 1:
            raise ValueError(f"rank={rank} must be positive")
        if sum(parts) != base.out_features or min(parts) < 1:
            raise ValueError(
                f"parts={parts} must be positive widths summing to {base.out_features}"
            )
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight.requires_grad_(False)
        self.bias = None if base.bias is None else base.bias.requires_grad_(False)
        self.rank = rank
        self.scale = alpha / rank
        self.parts = parts
        like = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_A = nn.Parameter(torch.empty(len(parts) * rank, base.in_features, **like))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, **like))
        self.lora_dropout = Dropout(dropout)
        self.active = True
        """Whether the update is added (:func:`adapters_disabled` turns it off)."""
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5), generator=generator)

    def adapters(self) -> list[tuple[Tensor, Tensor]]:
        """``(A, B)`` of each part: ``(rank, in_features)`` and ``(part width, rank)``."""
        pairs = zip(self.lora_A.split(self.rank), self.lora_B.split(self.parts), strict=True)
        return list(pairs)

    def delta_weight(self) -> Tensor:
        """The update of the weight, ``(out_features, in_features)``: each part's ``B A``,
        stacked, times ``alpha / rank``."""
        return torch.cat([b @ a for a, b in self.adapters()]) * self.scale

    def forward(self, x: Tensor) -> Tensor:
        if not self.active:
            return super().forward(x)
        h = F.linear(self.lora_dropout(x), self.lora_A).split(self.rank, dim=-1)
        update = [F.linear(h_part, b) for h_part, (_, b) in zip(h, self.adapters(), strict=True)]
        return super().forward(x) + torch.cat(update, dim=-1) * self.scale

    @torch.no_grad()
    def merged(self) -> Linear:
        """A plain :class:`Linear` computing what this one computes (in eval mode): weight
        ``W + B A * alpha / rank``, the same bias."""
        with torch.device("meta"):  # no weights drawn: they are set next
            plain = Linear(self.in_features, self.out_features, bias=self.bias is not None)
        plain.weight = nn.Parameter(self.weight + self.delta_weight())
        if self.bias is not None:
            plain.bias = nn.Parameter(self.bias.clone())
        return plain

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.rank}, scale={self.scale:g}, parts={self.parts}"


@contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` computing as its base within the block: each :class:`LoRALinear` in it
    gives its base map's output alone (no update, no adapter dropout), until the block ends,
    by an exception too, when each is as it was before."""
    layers = [module for module in model.modules() if isinstance(module, LoRALinear)]
    if not layers:
        raise ValueError(f"the {type(model).__name__} has no LoRA adapters to disable")
    before = [layer.active for layer in layers]
    for layer in layers:
        layer.active = False
    try:
        yield model
    finally:
        for layer, active in zip(layers, before, strict=True):
            layer.active = active
