"""FLOPs and bytes of the workloads, to hold against the machine's limits (``machine.py``)."""

from __future__ import annotations

from timing import Timing


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


def per_second(amount: float, timing: Timing) -> float:
    """``amount`` (bytes, tokens...) per second of the median run, in billions."""
    return amount / timing.median_s / 1e9


def decoding_bytes(
    weight_bytes: int,
    layers: int,
    kv_width: int,
    batch: int,
    lengths: range,
    cache_element_bytes: int = 4,
) -> int:
    """Bytes a cached decoder must read to generate a token at each position of ``lengths``
    for ``batch`` sequences: every weight once a step (the batch shares them) and, per
    sequence, the keys and values cached so far (``2 * layers * kv_width`` numbers a
    position, of ``cache_element_bytes`` each: fp32's 4 by default). Activations are a few
    KiB a step and are not counted: a floor."""
    cache = sum(2 * layers * kv_width * cache_element_bytes * length for length in lengths)
    return len(lengths) * weight_bytes + batch * cache


def beam_translation_flops(
    layers: int,
    d_model: int,
    d_ff: int,
    vocab: int,
    sources: list[int],
    steps: list[int],
    beam: int,
) -> float:
    """Forward FLOPs of translating sentences of ``sources`` real tokens, sentence ``i``
    decoded for ``steps[i]`` steps by ``beam`` beams: the encoder on every source token;
    the cross-attention keys and values of the source once; per step and beam the decoder's
    layers (self- and cross-attention Q and output maps, feed-forward) and the output
    projection, with attention over the target so far and the source. A floor: padding,
    beams that run longer than the best hypothesis and beam bookkeeping are not counted."""
    layer = layer_matmul_params(d_model, d_ff)
    total = 0.0
    for source, length in zip(sources, steps, strict=True):
        total += layers * (2 * layer * source + attention_flops(source, source, d_model))
        total += layers * 2 * 2 * d_model**2 * source  # cross-attention keys and values
        per_step = 2 * (layers * (layer + 2 * d_model**2) + vocab * d_model)
        attention = sum(
            layers * (attention_flops(1, t, d_model) + attention_flops(1, source, d_model))
            for t in range(1, length + 1)
        )
        total += beam * (per_step * length + attention)
    return total
