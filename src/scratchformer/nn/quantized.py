"""Linear maps with int8 weights: weight-only quantization for inference.

Decoding a few sequences reads every weight once a token, so its speed is bounded by the
bytes of the weights; int8 weights are a quarter of float32's. Each output row ``i`` of a
weight keeps its own scale (symmetric, per output channel)::

    scale[i] = max_j |w[i, j]| / 127,    q[i, j] = round(w[i, j] / scale[i])  in [-127, 127]

so that ``q * scale`` is within ``scale / 2`` of ``w`` everywhere (an all-zero row has scale
0 and stays zero). The product is ``(x @ q.T) * scale + bias``, written out: ``q`` converted
to the input's dtype, a float matmul, the scales. PyTorch's own weight-only int8 kernel
(``torch._weight_int8pack_mm``) computes the same from the int8 values, but on the CPUs
measured it is the slower of the two, eager and compiled, at every shape of a small GPT
(``python benchmarks/int8.py``; figures in docs/performance.md), so it is not used. The
tests hold the product equal to ``F.linear`` with the :meth:`~QuantizedLinear.dequantized`
weight.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def quantize_rows(weight: Tensor) -> tuple[Tensor, Tensor]:
    """``(q, scale)`` of a weight ``(out, in)``: int8 values ``(out, in)`` and float32
    scales ``(out,)``, symmetric per row. A row of zeros gets scale 0 and zeros."""
    weight = weight.detach().float()
    scales = weight.abs().amax(dim=1) / 127
    divisor = torch.where(scales > 0, scales, torch.ones_like(scales))  # zero rows: 0 / 1
    q = torch.round(weight / divisor[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


class QuantizedLinear(nn.Module):
    """``x @ (q * scale).T + bias`` with int8 values ``weight`` ``(out, in)`` and float32
    ``scales`` ``(out,)`` (and ``bias``, if any, kept in float32): buffers, for inference.
    :meth:`from_weight` quantizes a float weight."""

    def __init__(self, weight: Tensor, scales: Tensor, bias: Tensor | None = None) -> None:
        super().__init__()
        if weight.dtype != torch.int8 or weight.dim() != 2:
            raise ValueError(f"weight must be int8 (out, in), not {weight.dtype} {weight.shape}")
        if scales.shape != weight.shape[:1]:
            raise ValueError(f"scales {tuple(scales.shape)} must be (out,) of {weight.shape}")
        self.out_features, self.in_features = weight.shape
        self.register_buffer("weight", weight)
        self.register_buffer("scales", scales)
        self.register_buffer("bias", bias)

    @classmethod
    @torch.no_grad()
    def from_weight(cls, weight: Tensor, bias: Tensor | None = None) -> QuantizedLinear:
        """The int8 form of the linear map of float ``weight`` ``(out, in)`` and ``bias``."""
        q, scales = quantize_rows(weight)
        return cls(q, scales, None if bias is None else bias.detach().float().clone())

    def dequantized(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The weight ``q * scale`` ``(out, in)`` that the int8 values stand for, computed in
        ``dtype``: the reference the fast product is tested against."""
        return self.weight.to(dtype) * self.scales.to(dtype)[:, None]

    def forward(self, x: Tensor) -> Tensor:
        out = F.linear(x, self.weight.to(x.dtype)) * self.scales.to(x.dtype)
        return out if self.bias is None else out + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}, int8"
