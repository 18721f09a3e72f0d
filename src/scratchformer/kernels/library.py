"""The operators of the project's C++ kernels, and the library that runs them: defined and
built the first time a process asks for them (:func:`kernels_available`), not at import.

Each kernel is a PyTorch operator (schema and shape function here, the CPU kernel in the
``.cpp`` file beside this one), so that eager code, ``torch.compile`` and AOTInductor
packages all call the same kernel:

- ``torch.ops.scratchformer.int8_matmul`` (``int8_matmul.cpp``; :mod:`.int8_matmul`):
  float32 rows times int8 weights in int8 x int8 products.
- ``torch.ops.scratchformer.few_query_attention`` (``few_query_attention.cpp``): attention
  of a few queries a row over a key/value cache, a decoding step's, in float32
  (:func:`~scratchformer.inference.kernels.few_query_attention`).

``torch.utils.cpp_extension`` compiles them once, then keeps the build in torch's
extensions cache, with OpenMP, so that ATen's ``parallel_for`` in them runs on torch's
threads, and AVX2 alone, so that the build runs on every x86 CPU that torch runs AVX2
kernels on.
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

HERE = Path(__file__).parent
SOURCES = [HERE / "int8_matmul.cpp", HERE / "few_query_attention.cpp"]
X86 = ("x86_64", "amd64", "i686", "x86")
AVX2_CAPABILITIES = ("AVX2", "AVX512")
"""``torch.backends.cpu.get_cpu_capability()`` of CPUs that run the kernels."""
NAME = "scratchformer_cpu_kernels"
"""The library's name in torch's extensions cache (``~/.cache/torch_extensions``)."""
FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]
"""AVX2 and FMA alone (ATen's vectors in their AVX2 form), and OpenMP: ATen's
``parallel_for`` is a header template whose ``#pragma omp parallel`` a build without it
ignores, running on one thread."""
BUILT_SECONDS = 2.0
"""A load that took longer compiled the kernels, which is said on stderr (loading a kept
build takes less)."""


def _int8_matmul_shape(x: Tensor, weight: Tensor, scales: Tensor) -> Tensor:
    """The output's shape and dtype, for tracing (``torch.compile``, ``torch.export``)."""
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _attention_shape(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
    """The output's shape and dtype: ``q``'s, with ``v``'s features."""
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


@cache
def operators() -> torch.library.Library:
    """The operators' library, defined once a process: their schemas and shape functions
    (the C++ gives their CPU kernels). Kept alive here: a library that is freed takes its
    operators with it."""
    library = torch.library.Library("scratchformer", "DEF")
    library.define("int8_matmul(Tensor input, Tensor weight, Tensor scales) -> Tensor")
    library.define(
        "few_query_attention(Tensor q, Tensor k, Tensor v, Tensor mask, float scale) -> Tensor"
    )
    torch.library.register_fake("scratchformer::int8_matmul", _int8_matmul_shape, lib=library)
    torch.library.register_fake("scratchformer::few_query_attention", _attention_shape, lib=library)
    return library


@cache
def kernels_available() -> bool:
    """Whether the kernels run here: an x86 CPU with AVX2 kernels (not held below them by
    ``$ATEN_CPU_CAPABILITY``), and the operators defined and the library built and loaded
    (once a process; a failed build warns once, and the callers fall back to PyTorch's
    forms)."""
    if platform.machine().lower() not in X86:
        return False
    if torch.backends.cpu.get_cpu_capability() not in AVX2_CAPABILITIES:
        return False
    from torch.utils import cpp_extension

    operators()
    _find_ninja()
    start = time.perf_counter()
    try:
        cpp_extension.load(
            NAME,
            [str(source) for source in SOURCES],
            extra_cflags=FLAGS,
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
        )
    except (RuntimeError, OSError, ImportError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        warnings.warn(
            f"the CPU kernels could not be built ({reason}): int8 weights are multiplied "
            "in float32 and decoding attends in PyTorch's forms, more slowly",
            stacklevel=2,
        )
        return False
    seconds = time.perf_counter() - start
    if seconds > BUILT_SECONDS:
        print(f"built the CPU kernels in {seconds:.0f} s (kept)", file=sys.stderr)
    return True


def _find_ninja() -> None:
    """Put the ``ninja`` package's build tool on ``$PATH`` if none is there: torch builds
    with whatever ``ninja`` it finds, and an environment that is not activated has the
    package's outside the path."""
    if shutil.which("ninja") is None:
        import ninja

        os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, os.environ.get("PATH", "")])
