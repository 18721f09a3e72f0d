"""The machinery of fast products, apart from the building blocks a reader learns from.

``nn/`` computes every formula the readable way, in plain PyTorch. This package holds the
forms that run faster where they can: the project's C++ kernels for x86 CPUs with AVX2
(``int8_matmul.cpp``, ``few_query_attention.cpp``) and their PyTorch operators
(:mod:`.library`, defined and built the first time a process asks, never at import;
:mod:`.int8_matmul`), int8 values packed for compiled products (:mod:`.packed`), and the
int8 linear map that chooses among these forms (:mod:`.quantized`).
"""

from .library import kernels_available
from .quantized import KernelQuantizedLinear

__all__ = ["KernelQuantizedLinear", "kernels_available"]
