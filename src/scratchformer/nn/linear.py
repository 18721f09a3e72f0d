"""Linear maps that multiply a few rows in the orientation the CPU runs fastest.

Decoding a small batch multiplies every weight matrix by a handful of rows: one a sequence
(or a beam) per step. At the shapes of a small GPT (d_model 384, d_ff 1536, vocab 8192),
PyTorch's CPU GEMM computes ``x @ weight.T`` for 2 to 32 rows 1.1-2.5x slower than the same
product taken as ``(weight @ x.T).T`` (``python benchmarks/linear.py``), so :func:`linear`
takes that orientation there. Both are the same sums of the same products; only the order
of the additions may differ.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

FEW_ROWS = range(2, 33)
"""Numbers of rows for which the CPU multiplies as ``weight @ x.T``."""


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` over the last dimension of ``x``, as
    ``torch.nn.functional.linear``; a contiguous result either way."""
    rows = x.shape[:-1].numel()
    # compared, not looked up ``in`` the range: torch.compile may trace ``rows`` as a symbol
    if x.device.type != "cpu" or not FEW_ROWS.start <= rows < FEW_ROWS.stop:
        return F.linear(x, weight, bias)
    columns = x.reshape(rows, x.shape[-1]).T
    out = weight @ columns if bias is None else torch.addmm(bias[:, None], weight, columns)
    return out.T.contiguous().view(*x.shape[:-1], weight.shape[0])


class Linear(nn.Linear):
    """``torch.nn.Linear`` (same parameters and state dict) computed by :func:`linear`."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
