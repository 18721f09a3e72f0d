"""Int8 linear maps whose float32 products take the project's kernels where they serve.

:class:`~scratchformer.nn.QuantizedLinear` multiplies as it is written: ``q`` converted to
the product's dtype, a matmul, the scales. In bfloat16 that is the fast form (compiled, the
product lowers to Inductor's weight-only int8 GEMM, which reads the int8 values). In
float32 every int8 value is converted before its product, which costs about as much as
float32 weights, and compiled with frozen weights the conversion is folded into a float32
constant. :class:`KernelQuantizedLinear`, the map that
:func:`~scratchformer.inference.quantize` puts in a model, computes the float32 product of
a few rows in one of two other forms:

- **on an x86 CPU with AVX2**, up to :data:`INT8_ROWS` rows (decoding steps; eager or
  compiled): :func:`~.int8_matmul.int8_matmul`, which quantizes each row of ``x`` to 7
  bits and multiplies bytes by bytes. The tests hold it to the exact product of the
  quantized rows, and to ``F.linear`` with the
  :meth:`~scratchformer.nn.QuantizedLinear.dequantized` weight within the rounding of ``x``.
- **elsewhere** (a GPU, an Arm CPU), compiled, up to :data:`FEW_ROWS` rows (a decoding
  step): :func:`~.packed.packed_product` of the int8 values packed four to a word.

Every other product (more rows, bfloat16, eager without the kernel) is the written-out one.
``python benchmarks/int8.py`` times each form; docs/performance.md has the figures.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..nn import QuantizedLinear
from .library import kernels_available
from .packed import pack_columns, packed_product

INT8_ROWS = 32
"""Up to this many rows (decoding steps), a float32 product on an x86 CPU is
:func:`~.int8_matmul.int8_matmul`'s, faster there than the written-out form. Its lead
shrinks as the rows grow, and float32's GEMM gains most from AVX-512 kernels, so more rows
(a prompt, an encoder's batch) stay written out (docs/performance.md, "Int8 weights";
``python benchmarks/int8.py``)."""
FEW_ROWS = 1
"""Up to this many rows, a compiled float32 product without the int8 kernel is
:func:`~.packed.packed_product`: from 2 rows on, its unpacking, done again for every row,
costs about as much as reading float32 weights, or more (``python benchmarks/int8.py``;
docs/lab-notes.md, "Int8 weights")."""


class KernelQuantizedLinear(QuantizedLinear):
    """A :class:`~scratchformer.nn.QuantizedLinear` whose float32 products of a few rows
    take the int8 kernel where it runs, else, compiled, the packed words (see the module
    docstring); the same buffers and state."""

    def __init__(self, weight: Tensor, scales: Tensor, bias: Tensor | None = None) -> None:
        super().__init__(weight, scales, bias)
        self.int8_products = kernels_available()
        """Whether float32 products of a few rows on the CPU are
        :func:`~.int8_matmul.int8_matmul`'s (decided, and the kernel built, once a
        process)."""
        packs = not self.int8_products and self.in_features % 4 == 0
        words = pack_columns(weight) if packs else None
        self.register_buffer("words", words, persistent=False)  # (compiled float32 steps)

    def product(self, x: Tensor, dtype: torch.dtype) -> Tensor:
        if self.int8_product_for(x, dtype):  # (the kernel is loaded: the operator itself)
            return torch.ops.scratchformer.int8_matmul(x, self.weight, self.scales)
        if self.packed_for(x, dtype):
            return packed_product(x, self.words) * self.scales
        return super().product(x, dtype)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        """Load as every module does, then pack the loaded int8 values afresh: the words are
        not saved, and a quantized run is loaded into a model quantized from random ones."""
        super()._load_from_state_dict(state_dict, prefix, *args)
        if self.words is not None:
            self.words = pack_columns(self.weight)

    def int8_product_for(self, x: Tensor, dtype: torch.dtype) -> bool:
        """Whether the product with ``x`` in ``dtype`` is
        :func:`~.int8_matmul.int8_matmul`'s: float32 products of up to :data:`INT8_ROWS`
        rows of float32 input on a CPU that runs it."""
        if not self.int8_products or x.device.type != "cpu":
            return False
        return dtype == x.dtype == torch.float32 and x.shape[:-1].numel() <= INT8_ROWS

    def packed_for(self, x: Tensor, dtype: torch.dtype) -> bool:
        """Whether the product with ``x`` in ``dtype`` is :func:`~.packed.packed_product`:
        compiled, in float32, up to :data:`FEW_ROWS` rows, of a weight whose columns pack."""
        if not torch.compiler.is_compiling() or self.words is None:  # (every eager call)
            return False
        return dtype == torch.float32 and x.shape[:-1].numel() <= FEW_ROWS
