"""Linear maps that multiply a few rows in the orientation the CPU runs fastest.

Decoding a small batch multiplies every weight matrix by a handful of rows: one a sequence
(or a beam) per step. For some numbers of rows, PyTorch's CPU GEMM computes
``x @ weight.T`` slower than the same product taken as ``(weight @ x.T).T``, and which
numbers depends on the CPU's instruction set. :data:`TRANSPOSED_ROWS` keeps, for each
instruction set measured (``torch.backends.cpu.get_cpu_capability()``), the row counts
where the transposed product was faster at the shapes of a small GPT (d_model 384, d_ff
1536, vocab 8192; ``python benchmarks/linear.py``, figures in ``docs/performance.md``), and
:func:`linear` takes it there; an instruction set not measured gets
``torch.nn.functional.linear`` throughout. Both are the same sums of the same products;
only the order of the additions may differ.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

TRANSPOSED_ROWS: dict[str, range] = {
    "AVX2": range(2, 33),
    "AVX512": range(2, 12),
}
"""Instruction set -> numbers of rows for which the CPU multiplies as ``weight @ x.T``."""


def transposed_rows() -> range:
    """The numbers of rows for which this CPU multiplies as ``weight @ x.T``: the entry of
    its instruction set, none for one not measured."""
    return TRANSPOSED_ROWS.get(torch.backends.cpu.get_cpu_capability(), range(0))


FEW_ROWS = transposed_rows()
"""This CPU's :func:`transposed_rows`, looked up once: :func:`linear` runs at every step."""


def transposed_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``torch.nn.functional.linear`` taken as ``(weight @ x.T).T``, contiguous."""
    rows = x.shape[:-1].numel()
    columns = x.reshape(rows, x.shape[-1]).T
    out = weight @ columns if bias is None else torch.addmm(bias[:, None], weight, columns)
    return out.T.contiguous().view(*x.shape[:-1], weight.shape[0])


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` over the last dimension of ``x``, as
    ``torch.nn.functional.linear``; a contiguous result either way."""
    rows = x.shape[:-1].numel()
    # compared, not looked up ``in`` the range: torch.compile may trace ``rows`` as a symbol
    if x.device.type != "cpu" or not FEW_ROWS.start <= rows < FEW_ROWS.stop:
        return F.linear(x, weight, bias)
    return transposed_linear(x, weight, bias)


class Linear(nn.Linear):
    """``torch.nn.Linear`` (same parameters and state dict) computed by :func:`linear`."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
