"""Layer normalisation (Ba et al., 2016), as ``torch.nn.LayerNorm`` computes it, and its
simplification RMSNorm (Zhang and Sennrich, 2019), as Llama uses it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import Registry

if TYPE_CHECKING:
    from ..config import ModelConfig


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float = 1e-5) -> Tensor:
    """Normalise the last dimension, written out.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias``, where ``var`` is the *biased*
    variance (divide by n, not n - 1) and ``eps`` sits inside the square root. Dividing by
    the unbiased standard deviation plus eps, as some tutorials do, gives other numbers.
    """
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    y = (x - mean) * torch.rsqrt(var + eps) * weight
    return y if bias is None else y + bias


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """``y = x / sqrt(mean(x^2) + eps) * weight`` over the last dimension, written out: layer
    normalisation without re-centring (no mean subtracted, no bias), computed in float32
    whatever the input's dtype, as Llama does."""
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y.to(x.dtype) * weight


class LayerNorm(nn.Module):
    """LayerNorm over the last dimension with a learned gain and (optional) bias; with
    ``centred=False`` it is RMSNorm (no mean subtracted, no bias).

    ``forward`` runs PyTorch's fused kernels, which the tests prove equal to the written-out
    :func:`layer_norm` and :func:`rms_norm`, and faster, forward and backward.
    """

    def __init__(
        self, d_model: int, eps: float = 1e-5, bias: bool = True, centred: bool = True
    ) -> None:
        super().__init__()
        self.eps = eps
        self.centred = centred
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias and centred else None

    @classmethod
    def from_config(cls, config: ModelConfig) -> LayerNorm:
        """The norm of a model's width, eps and bias setting."""
        return cls(config.d_model, config.layer_norm_eps, config.bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.centred:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        y = F.rms_norm(x.float(), self.weight.shape, eps=self.eps)
        return y.to(x.dtype) * self.weight

    def extra_repr(self) -> str:
        kind = "" if self.centred else ", centred=False"
        return f"{self.weight.shape[0]}, eps={self.eps}, bias={self.bias is not None}{kind}"


class RMSNorm(LayerNorm):
    """Root-mean-square normalisation with a learned gain (Llama, Mistral, Qwen2): a
    :class:`LayerNorm` that does not re-centre, so it has no bias."""

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__(d_model, eps, bias=False, centred=False)

    @classmethod
    def from_config(cls, config: ModelConfig) -> RMSNorm:
        """The norm of a model's width and eps (never a bias)."""
        return cls(config.d_model, config.layer_norm_eps)


NORMS: Registry[Callable[[ModelConfig], LayerNorm]] = Registry("norm")
"""``ModelConfig.norm`` -> the norm of a config."""
NORMS.add("layer", LayerNorm.from_config)
NORMS.add("rms", RMSNorm.from_config)
