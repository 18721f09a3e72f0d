"""Position-wise feed-forward network: ``FFN(x) = act(x W1 + b1) W2 + b2``, or gated
(GLU; Shazeer, 2020): ``FFN(x) = (act(x W1) * x W3) W2``, Llama's SwiGLU with ``silu``."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import Registry
from .dropout import Dropout
from .linear import Linear

if TYPE_CHECKING:
    from ..config import ModelConfig

ACTIVATIONS: Registry[Callable[[Tensor], Tensor]] = Registry("activation")
"""``ModelConfig.activation`` -> the function."""
ACTIVATIONS.add("relu", F.relu)
ACTIVATIONS.add("gelu", F.gelu)
ACTIVATIONS.add("gelu_tanh", partial(F.gelu, approximate="tanh"))
ACTIVATIONS.add("silu", F.silu)


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
        self.activation = ACTIVATIONS[activation]
        self.w1 = Linear(d_model, d_ff, bias=bias)
        self.w2 = Linear(d_ff, d_model, bias=bias)
        self.w3 = Linear(d_model, d_ff, bias=bias) if gated else None
        self.dropout = Dropout(dropout)

    @classmethod
    def from_config(cls, config: ModelConfig) -> FeedForward:
        """The network of a model's widths, dropout, activation, biases and gating."""
        return cls(
            config.d_model,
            config.d_ff,
            config.dropout,
            config.activation,
            config.bias,
            gated=config.gated,
        )

    def forward(self, x: Tensor) -> Tensor:
        h = self.activation(self.w1(x))
        if self.w3 is not None:
            h = h * self.w3(x)
        return self.w2(self.dropout(h))


FEED_FORWARDS: Registry[Callable[[ModelConfig], FeedForward]] = Registry("feed_forward")
"""``ModelConfig.feed_forward`` -> the network of a config (one class, plain or gated as
``config.gated`` says)."""
FEED_FORWARDS.add("plain", FeedForward.from_config)
FEED_FORWARDS.add("gated", FeedForward.from_config)
