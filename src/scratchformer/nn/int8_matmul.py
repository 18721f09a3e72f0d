"""Int8 x int8 products on x86 CPUs: the float32 product of int8 weights, in int8.

Without native bfloat16, int8 weights multiplied in float32 cost about as much as float32
weights: every int8 value is converted before its product, and the conversions, not the
bytes, bound the speed (docs/performance.md, "Int8 weights"). :func:`int8_matmul` instead
quantizes each row of the input to int8 as it comes (symmetric, its own scale), as
llama.cpp's q8_0 does, and multiplies int8 by int8 with AVX2's byte products, 32 an
instruction, summing exactly in int32: a product reads the int8 bytes and no float copy of
the weight exists, eagerly, under ``torch.compile`` and in an AOTInductor package alike
(it is a PyTorch operator, ``torch.ops.scratchformer.int8_matmul``). PyTorch itself has no
int8 x int8 product that serves here on AVX2: ``torch._int_mm`` falls to a slow path,
oneDNN's uint8 x int8 products saturate, FBGEMM's dynamic linear cannot be traced, and
``torch._weight_int8pack_mm`` takes float inputs and is slower than float32
(docs/performance.md, "Int8 weights").

The kernel is C++ (``int8_matmul.cpp`` beside this file), compiled by
``torch.utils.cpp_extension`` the first time a process needs it (about ten seconds, then
kept in torch's extensions cache). :func:`int8_matmul_available` says whether it runs here:
an x86 CPU with AVX2 and a C++ compiler. Where it does not, int8 weights are multiplied in
float32 (:class:`~scratchformer.nn.QuantizedLinear`).
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import time
import warnings
from functools import cache
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_suffix(".cpp")
X86 = ("x86_64", "amd64", "i686", "x86")
AVX2_CAPABILITIES = ("AVX2", "AVX512")
"""``torch.backends.cpu.get_cpu_capability()`` of CPUs that run the kernel."""
NAME = "scratchformer_int8_matmul"
"""The library's name in torch's extensions cache (``~/.cache/torch_extensions``)."""
FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp"]
"""The kernel's instruction set: AVX2 alone, so the built library runs on every x86 CPU
that torch runs AVX2 kernels on."""
BUILT_SECONDS = 2.0
"""A load that took longer compiled the kernel, which is said on stderr: loading a kept
build takes a fraction of a second."""


@cache
def int8_matmul_available() -> bool:
    """Whether :func:`int8_matmul` runs here: an x86 CPU with AVX2 kernels (not held below
    them by ``$ATEN_CPU_CAPABILITY``), and the kernel built and loaded (once a process; a
    failed build warns once, and int8 weights are then multiplied in float32)."""
    if platform.machine().lower() not in X86:
        return False
    if torch.backends.cpu.get_cpu_capability() not in AVX2_CAPABILITIES:
        return False
    from torch.utils import cpp_extension

    _find_ninja()
    start = time.perf_counter()
    try:
        cpp_extension.load(
            NAME, [str(SOURCE)], extra_cflags=FLAGS, extra_ldflags=["-fopenmp"], is_python_module=False
        )
    except (RuntimeError, OSError, ImportError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        warnings.warn(
            f"the int8 x int8 kernel could not be built ({reason}): int8 weights are "
            "multiplied in float32, more slowly",
            stacklevel=2,
        )
        return False
    seconds = time.perf_counter() - start
    if seconds > BUILT_SECONDS:
        print(f"built the int8 x int8 kernel in {seconds:.0f} s (kept)", file=sys.stderr)
    return True


def _find_ninja() -> None:
    """Put the ``ninja`` package's build tool on ``$PATH`` if none is there: torch builds
    with whatever ``ninja`` it finds, and an environment that is not activated has the
    package's outside the path."""
    if shutil.which("ninja") is None:
        import ninja

        os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, os.environ.get("PATH", "")])


def int8_matmul(x: Tensor, weight: Tensor, scales: Tensor) -> Tensor:
    """``x @ (weight * scales[:, None]).T`` for float32 ``x`` ``(..., in)`` on the CPU, int8
    ``weight`` ``(out, in)`` with values in [-127, 127] and float32 ``scales`` ``(out,)``,
    with each row of ``x`` quantized to int8 first (scale ``max |x| / 127``, values
    ``round(x / scale)``): the products are exact, the rounding of ``x`` is the one
    difference from multiplying by the dequantized weight (about 1% of the output's norm for
    normal rows, as much as the rounding of the weights).
    Where the kernel does not run (:func:`int8_matmul_available`), a ``RuntimeError``."""
    if not torch.compiler.is_compiling() and not int8_matmul_available():
        raise RuntimeError("the int8 x int8 kernel runs on x86 CPUs with AVX2 only")
    return torch.ops.scratchformer.int8_matmul(x, weight, scales)


OPERATORS = torch.library.Library("scratchformer", "DEF")
OPERATORS.define("int8_matmul(Tensor input, Tensor weight, Tensor scales) -> Tensor")


@torch.library.register_fake("scratchformer::int8_matmul")
def _int8_matmul_shape(x: Tensor, weight: Tensor, scales: Tensor) -> Tensor:
    """The output's shape and dtype, for tracing (``torch.compile``, ``torch.export``)."""
    return x.new_empty((*x.shape[:-1], weight.shape[0]))
