"""Position-wise feed-forward network: ``FFN(x) = act(x W1 + b1) W2 + b2``, or gated
(GLU; Shazeer, 2020): ``FFN(x) = (act(x W1) * x W3) W2``, Llama's SwiGLU with ``silu``."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .dropout import Dropout
from .linear import Linear

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}
"""Name -> function; the names are ``config.ACTIVATIONS`` (``nn`` imports nothing from the
package)."""


class FeedForward(nn.Module):
    """Two linear maps with an activation between, applied to every position alike.

    ReLU as in the paper; ``gelu`` (BERT), ``gelu_tanh`` (GPT-2) and ``silu`` as options.
    ``gated`` adds a third map ``w3`` whose output multiplies the activation's (Llama's
    ``gate_proj``, ``up_proj`` and ``down_proj`` are ``w1``, ``w3`` and ``w2``, the names of
    Meta's code). Dropout sits after the activation (and gate), where
    ``torch.nn.TransformerEncoderLayer`` puts it.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        bias: bool = True,
        gated: bool = False,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} must be one of {', '.join(ACTIVATIONS)}")
        self.activation = activation
        self.w1 = Linear(d_model, d_ff, bias=bias)
        self.w2 = Linear(d_ff, d_model, bias=bias)
        self.w3 = Linear(d_model, d_ff, bias=bias) if gated else None
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = ACTIVATIONS[self.activation](self.w1(x))
        if self.w3 is not None:
            h = h * self.w3(x)
        return self.w2(self.dropout(h))
