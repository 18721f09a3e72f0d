"""Int8 x int8 products on x86 CPUs: the float32 product of int8 weights, in int8.

Without native bfloat16, int8 weights multiplied in float32 cost about as much as float32
weights: every int8 value is converted before its product, and the conversions, not the
bytes, bound the speed (docs/lab-notes.md, "Int8 weights"). :func:`int8_matmul` instead
quantizes each row of the input as it comes (symmetric, its own scale, 7 bits), as
llama.cpp's q8_0 does (8 bits, a scale for every 32 values), and multiplies bytes by bytes
with AVX2's byte products, 32 an instruction, summing exactly in int32: a product reads the
int8 bytes and no float copy of the weight exists, eagerly, under ``torch.compile`` and in
an AOTInductor package alike (it is a PyTorch operator,
``torch.ops.scratchformer.int8_matmul``). PyTorch itself has no int8 x int8 product that
serves here on AVX2: ``torch._int_mm`` falls to a slow path,
oneDNN's uint8 x int8 products saturate, FBGEMM's dynamic linear cannot be traced, and
``torch._weight_int8pack_mm`` takes float inputs and is slower than float32
(docs/lab-notes.md, "Int8 weights").

The kernel is C++ (``int8_matmul.cpp`` beside this file), one of the project's CPU
kernels (:mod:`.library`, built the first time a process needs them).
:func:`~.library.kernels_available` says whether it runs here: an x86 CPU with AVX2 and a
C++ compiler. Where it does not, int8 weights are multiplied in float32
(:class:`~scratchformer.nn.QuantizedLinear`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .library import kernels_available


def int8_matmul(x: Tensor, weight: Tensor, scales: Tensor) -> Tensor:
    """``x @ (weight * scales[:, None]).T`` for float32 ``x`` ``(..., in)`` on the CPU, int8
    ``weight`` ``(out, in)`` and float32 ``scales`` ``(out,)``, with each row of ``x``
    quantized to 7 bits first (scale ``max |x| / 63``, values ``round(x / scale)`` in
    [-63, 63]): the products are exact, the rounding of ``x`` is the one difference from
    multiplying by the dequantized weight (about 2% of the output's norm for normal rows).
    Seven bits, not eight, let the kernel offset the weights to unsigned bytes instead of
    moving signs between operands, an instruction fewer per product (``int8_matmul.cpp``).
    Where the kernel does not run (:func:`~.library.kernels_available`), a ``RuntimeError``."""
    if not torch.compiler.is_compiling() and not kernels_available():
        raise RuntimeError("the int8 x int8 kernel runs on x86 CPUs with AVX2 only")
    return torch.ops.scratchformer.int8_matmul(x, weight, scales)
