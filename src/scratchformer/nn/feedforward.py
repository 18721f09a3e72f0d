"""Position-wise feed-forward network: ``FFN(x) = act(x W1 + b1) W2 + b2``."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .dropout import Dropout
from .linear import Linear

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}
"""Name -> function; the names are ``config.ACTIVATIONS`` (``nn`` imports nothing from the
package)."""


class FeedForward(nn.Module):
    """Two linear maps with an activation between, applied to every position alike.

    ReLU as in the paper; ``gelu`` (BERT) and ``gelu_tanh`` (GPT-2) as options. Dropout
    sits after the activation, where ``torch.nn.TransformerEncoderLayer`` puts it.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} must be one of {', '.join(ACTIVATIONS)}")
        self.activation = activation
        self.w1 = Linear(d_model, d_ff, bias=bias)
        self.w2 = Linear(d_ff, d_model, bias=bias)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(ACTIVATIONS[self.activation](self.w1(x))))
