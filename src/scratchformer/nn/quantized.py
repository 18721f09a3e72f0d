"""Linear maps with int8 weights: weight-only quantization for inference.

Decoding a few sequences reads every weight once a token, so its speed is bounded by the
bytes of the weights; int8 weights are a quarter of float32's. Each output row ``i`` of a
weight keeps its own scale (symmetric, per output channel)::

    scale[i] = max_j |w[i, j]| / 127,    q[i, j] = round(w[i, j] / scale[i])  in [-127, 127]

so that ``q * scale`` is within ``scale / 2`` of ``w`` everywhere (an all-zero row has scale
0 and stays zero). The product is ``(x @ q.T) * scale + bias``, in one of three forms, by the
product's dtype (the input's, or autocast's where autocast is on) and the CPU:

- **float32 on an x86 CPU with AVX2**, up to :data:`INT8_ROWS` rows (decoding steps; eager
  or compiled): :func:`~scratchformer.nn.int8_matmul.int8_matmul`, which quantizes each row
  of ``x`` to 7 bits and multiplies bytes by bytes. The tests hold it to the exact product
  of the quantized rows, and to ``F.linear`` with the :meth:`~QuantizedLinear.dequantized`
  weight within the rounding of ``x``. More rows (a prompt, an encoder's batch) take the
  written-out form below, at float32's speed.
- **bfloat16** (``--precision auto`` on a CPU with native bfloat16): ``q`` converted to
  the product's dtype, a matmul, the scales. ``torch.compile`` keeps the int8 constant
  and lowers the product to its weight-only int8 GEMM, which reads the int8 values.
- **float32 elsewhere** (a GPU, an Arm CPU, more rows): the same written-out product.
  Compiled, a product of up to :data:`FEW_ROWS` rows (a decoding step) without the int8
  kernel takes :func:`packed_product`, since the compiler would fold ``q`` converted to
  float32 into a constant and read float32 weights: the int8 values packed four to an
  int32 word (:func:`pack_columns`), unpacked by shifts inside the one loop that Inductor
  fuses the product into. Words rather than bytes, since Inductor loads as many elements
  of every dtype as a float vector holds.

``python benchmarks/int8.py`` times each form; docs/performance.md has the figures.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cpu_kernels import kernels_available

INT8_ROWS = 32
"""Up to this many rows, a float32 product on an x86 CPU is :func:`int8_matmul`'s, 1.8x
or more faster than the written-out form at 1 to 32 rows (AVX2 kernels, two threads). Its
lead shrinks with more rows (1.32x at 512) and float32's GEMM is twice as fast with AVX-512
kernels, where the larger row counts are not yet measured; so more rows stay written out
(python benchmarks/int8.py; docs/lab-notes.md, "On every thread, and attention in
C++")."""
FEW_ROWS = 1
"""Up to this many rows, a compiled float32 product is :func:`packed_product`: from 2 rows
on, its unpacking, done again for every row, costs about as much as reading float32
weights, or more (``python benchmarks/int8.py``; docs/lab-notes.md, "Int8 weights")."""
BYTE_SHIFTS = (24, 16, 8)
"""Left shifts that bring byte ``j`` (0, 1, 2) of a word to its top, whence an arithmetic
right shift by 24 brings it back sign-extended (byte 3 is there already)."""


def quantize_rows(weight: Tensor) -> tuple[Tensor, Tensor]:
    """``(q, scale)`` of a weight ``(out, in)``: int8 values ``(out, in)`` and float32
    scales ``(out,)``, symmetric per row. A row of zeros gets scale 0 and zeros."""
    weight = weight.detach().float()
    scales = weight.abs().amax(dim=1) / 127
    divisor = torch.where(scales > 0, scales, torch.ones_like(scales))  # zero rows: 0 / 1
    q = torch.round(weight / divisor[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


def pack_columns(q: Tensor) -> Tensor:
    """int8 values ``(out, in)`` as int32 words ``(out, in / 4)``: byte ``j`` (from the
    lowest) of word ``i`` holds column ``j * in / 4 + i``, so that each byte position of a
    row of words spans a contiguous quarter of the input."""
    out_features, in_features = q.shape
    if in_features % 4:
        raise ValueError(f"{in_features} columns do not pack four to a word")
    quarters = q.view(out_features, 4, in_features // 4).to(torch.int32) & 0xFF
    return sum(quarters[:, j] << (8 * j) for j in range(4))


def packed_product(x: Tensor, words: Tensor) -> Tensor:
    """``x @ q.T`` from ``q``'s :func:`pack_columns` ``words`` ``(out, in / 4)``: byte ``j``
    of every word (brought to the top by a left shift, back sign-extended by an arithmetic
    right shift) times quarter ``j`` of ``x``, the four products summed along the words.
    Inductor fuses it into one loop that loads each word once (run eagerly, it materialises
    the products: compiled use only)."""
    out_features, quarter = words.shape
    quarters = x.reshape(-1, 1, 4, quarter)
    total = quarters[..., 3, :] * (words >> 24).to(x.dtype)
    for j, shift in enumerate(BYTE_SHIFTS):
        total = total + quarters[..., j, :] * ((words << shift) >> 24).to(x.dtype)
    return total.sum(dim=-1).view(*x.shape[:-1], out_features)


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
        self.int8_products = kernels_available()
        """Whether float32 products of a few rows on the CPU are :func:`int8_matmul`'s
        (decided, and the kernel built, once a process)."""
        packs = not self.int8_products and self.in_features % 4 == 0
        words = pack_columns(weight) if packs else None
        self.register_buffer("words", words, persistent=False)  # (compiled float32 steps)

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
        dtype = product_dtype(x)
        if self.int8_product_for(x, dtype):  # (the kernel is loaded: the operator itself)
            out = torch.ops.scratchformer.int8_matmul(x, self.weight, self.scales)
        elif self.packed_for(x, dtype):
            out = packed_product(x, self.words) * self.scales
        else:
            out = F.linear(x.to(dtype), self.weight.to(dtype)) * self.scales.to(dtype)
        return out if self.bias is None else out + self.bias.to(dtype)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        """Load as every module does, then pack the loaded int8 values afresh: the words are
        not saved, and a quantized run is loaded into a model quantized from random ones."""
        super()._load_from_state_dict(state_dict, prefix, *args)
        if self.words is not None:
            self.words = pack_columns(self.weight)

    def int8_product_for(self, x: Tensor, dtype: torch.dtype) -> bool:
        """Whether the product with ``x`` in ``dtype`` is :func:`int8_matmul`'s: float32
        products of up to :data:`INT8_ROWS` rows of float32 input on a CPU that runs it."""
        if not self.int8_products or x.device.type != "cpu":
            return False
        return dtype == x.dtype == torch.float32 and x.shape[:-1].numel() <= INT8_ROWS

    def packed_for(self, x: Tensor, dtype: torch.dtype) -> bool:
        """Whether the product with ``x`` in ``dtype`` is :func:`packed_product`: compiled,
        in float32, up to :data:`FEW_ROWS` rows, of a weight whose columns pack."""
        if not torch.compiler.is_compiling() or self.words is None:  # (every eager call)
            return False
        return dtype == torch.float32 and x.shape[:-1].numel() <= FEW_ROWS

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}, int8"
