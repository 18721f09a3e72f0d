"""FLOPs of the workloads, and the machine's fp32 matmul peak to hold them against."""

from __future__ import annotations

from functools import partial

import torch

from timing import Timing, interleaved

PEAK_SIZE = 2048


def layer_matmul_params(d_model: int, d_ff: int) -> int:
    """Weights in the matmuls of one layer with self-attention only: Q, K, V and output
    projections (4 d^2) and the feed-forward (2 d d_ff). Biases and norms are not matmuls."""
    return 4 * d_model**2 + 2 * d_model * d_ff


def attention_flops(queries: int, keys: int, d_model: int) -> int:
    """Forward FLOPs of attention proper in one layer, one sequence, all heads: the scores
    ``Q K^T`` and their product with ``V``, each ``2 * queries * keys * d_model``. Every
    query-key pair counts, causal or not (the convention of PaLM's model FLOPs)."""
    return 4 * queries * keys * d_model


def train_flops(forward_flops: float) -> float:
    """FLOPs of a training step from those of its forward pass.

    A matmul with a weight of P entries costs 2 P FLOPs per token forward (a multiply-add
    is 2 FLOPs) and twice that backward (the gradient of its input and of its weight), so
    6 P per token in all (Kaplan et al., 2020); attention's two matmuls scale alike. So a
    step is 3x its forward: ``6 * params_in_matmuls * tokens`` plus 3x the attention terms
    of :func:`attention_flops`. Embedding look-ups, LayerNorm, softmax, activations, the
    loss and the optimizer are not counted: the figure is a floor, the same for every
    candidate of a case (same shapes), so GFLOP/s ranks candidates as tokens/s does and
    says how much of the machine's matmul peak each one reaches.
    """
    return 3 * forward_flops


def gflops(flops: float, timing: Timing) -> float:
    return flops / timing.median_s / 1e9


def matmul_peak_gflops(repeats: int) -> float:
    """The machine's fp32 matmul peak: the fastest of ``repeats`` 2048 x 2048 ``torch.mm``."""
    a, b = torch.randn(PEAK_SIZE, PEAK_SIZE), torch.randn(PEAK_SIZE, PEAK_SIZE)
    out = torch.empty(PEAK_SIZE, PEAK_SIZE)
    (timing,) = interleaved([partial(torch.mm, a, b, out=out)], repeats, warmup=1)
    return 2 * PEAK_SIZE**3 / min(timing.samples_s) / 1e9
