"""Linear maps with int8 weights: weight-only quantization for inference.

Decoding a few sequences reads every weight once a token, so its speed is bounded by the
bytes of the weights; int8 weights are a quarter of float32's. Each output row ``i`` of a
weight keeps its own scale (symmetric, per output channel)::

    scale[i] = max_j |w[i, j]| / 127,    q[i, j] = round(w[i, j] / scale[i])  in [-127, 127]

so that ``q * scale`` is within ``scale / 2`` of ``w`` everywhere (an all-zero row has scale
0 and stays zero). The product is ``(x @ q.T) * scale + bias`` in the product's dtype (the
input's, or autocast's where autocast is on), written out: ``q`` converted to that dtype, a
matmul, the scales. In bfloat16 (``--precision auto`` on a CPU with native bfloat16),
``torch.compile`` keeps the int8 constant and lowers the product to its weight-only int8
GEMM, which reads the int8 values. Float32 products of a few rows have faster forms, the
project's kernels (:mod:`scratchformer.kernels.quantized`), which a model quantized by
:func:`~scratchformer.inference.quantize` takes.
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


def product_dtype(x: Tensor) -> torch.dtype:
    """The dtype of a product with input ``x``: autocast's, where it is on, else ``x``'s."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


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
        ``dtype``: the reference the kernels' products are tested against."""
        return self.weight.to(dtype) * self.scales.to(dtype)[:, None]

    def forward(self, x: Tensor) -> Tensor:
        dtype = product_dtype(x)
        out = self.product(x, dtype)
        return out if self.bias is None else out + self.bias.to(dtype)

    def product(self, x: Tensor, dtype: torch.dtype) -> Tensor:
        """``x @ (q * scale).T`` in ``dtype``: the int8 values converted, a matmul, the
        scales."""
        return F.linear(x.to(dtype), self.weight.to(dtype)) * self.scales.to(dtype)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}, int8"
