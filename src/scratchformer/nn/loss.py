"""Cross-entropy of a linear projection to a vocabulary, without the full logits tensor.

Training a language model or a translator ends in ``F.cross_entropy(hidden @ weight.T,
targets)``. Done in that order it writes ``tokens x vocab`` logits (50 MB for 1,536 tokens
of an 8,000-word vocabulary), reads them back for ``log_softmax``, writes its gradient
(after zero-filling it) and reads that twice more for the two gradient products.
:func:`linear_cross_entropy` instead takes a block of rows at a time into one reused
buffer: logits, their exponentials and sums, then the block's share of both gradients. The
rest of the gradient -- the target distribution's part -- and the target logits are small
products with ``hidden``, computed once for all rows. The backward pass only scales the
gradients. ``python benchmarks/loss.py`` measures it against the two-step computation.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE_INDEX = -100
"""Target that the loss and the metrics skip (padding, non-first word pieces), as in
``torch.nn.functional.cross_entropy``."""

CHUNK_ROWS = 256
"""Rows per block: enough for full-speed products, few enough to keep the logits small."""


def linear_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    label_smoothing: float = 0.0,
    ignore_index: int = IGNORE_INDEX,
    chunk_rows: int = CHUNK_ROWS,
    bias: Tensor | None = None,
) -> Tensor:
    """``F.cross_entropy(F.linear(hidden, weight, bias), targets, ...)`` averaged over the
    targets that are not ``ignore_index``: ``hidden`` is ``(..., d)``, ``weight``
    ``(vocab, d)``, ``bias`` (optional) ``(vocab,)``, ``targets`` has ``hidden``'s leading
    shape.

    Computed block by block (see the module's docstring) for float32 or float64 outside
    autocast; under autocast, or for other dtypes, as the two steps it stands for.
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing={label_smoothing} must be in [0, 1]")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows={chunk_rows} must be at least 1")
    hidden = hidden.reshape(-1, hidden.shape[-1])
    targets = targets.reshape(-1)
    if targets.shape[0] != hidden.shape[0]:
        raise ValueError(f"{targets.shape[0]} targets for {hidden.shape[0]} hidden states")
    blockwise = (
        hidden.dtype == weight.dtype
        and (bias is None or bias.dtype == weight.dtype)
        and hidden.dtype in (torch.float32, torch.float64)
        and not torch.is_autocast_enabled(hidden.device.type)
    )
    if not blockwise:
        logits = F.linear(hidden, weight, bias).float()
        return F.cross_entropy(
            logits, targets, ignore_index=ignore_index, label_smoothing=label_smoothing
        )
    counted = targets != ignore_index
    return _LinearCrossEntropy.apply(
        hidden[counted], weight, bias, targets[counted], label_smoothing, chunk_rows
    )


class _LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``hidden @ weight.T + bias`` against ``targets`` (all counted),
    with label smoothing; the gradients are computed in the forward pass.

    Per row, with logits ``z``, smoothing ``e`` and ``V`` classes, the loss is
    ``logsumexp(z) - (1 - e) z[target] - e mean(z)`` and its gradient with respect to ``z``
    is ``softmax(z) - (1 - e) onehot(target) - e / V``.
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        label_smoothing: float,
        chunk_rows: int,
    ) -> Tensor:
        rows, vocab = hidden.shape[0], weight.shape[0]
        smoothing, sharpness = label_smoothing, 1.0 - label_smoothing
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        target_rows = weight[targets]
        mean_row = weight.mean(0) if smoothing else None
        losses = -sharpness * (hidden * target_rows).sum(-1)  # the target logits' part
        if mean_row is not None:
            losses -= smoothing * (hidden @ mean_row)  # mean(z) = hidden . mean_row
        if bias is not None:
            losses -= sharpness * bias[targets] + smoothing * bias.mean()
        d_hidden = torch.empty_like(hidden) if need_hidden else None
        d_weight = torch.zeros_like(weight) if need_weight else None
        d_bias = torch.zeros_like(bias) if need_bias else None
        buffer = hidden.new_empty(vocab * min(chunk_rows, rows))
        for start in range(0, rows, chunk_rows):
            block = hidden[start : start + chunk_rows]
            end = start + block.shape[0]
            # (vocab, rows): the orientation in which the CPU multiplies fastest
            exps = torch.mm(weight, block.T, out=buffer[: vocab * len(block)].view(vocab, -1))
            if bias is not None:
                exps.add_(bias[:, None])
            shift = exps.amax(0)
            sums = exps.sub_(shift).exp_().sum(0)
            losses[start:end] += sums.log() + shift
            # softmax = exps / sums: the division goes to the small factor of each product
            inverse = sums.reciprocal()[:, None]
            if need_hidden:
                torch.mm(exps.T, weight, out=d_hidden[start:end]).mul_(inverse)
            if need_weight:
                d_weight.addmm_(exps, block * inverse)
            if need_bias:
                d_bias.add_(exps @ inverse[:, 0])
        # the target distribution's part of the gradient: (1 - e) onehot + e / V
        if need_hidden:
            d_hidden.sub_(target_rows, alpha=sharpness)
            if mean_row is not None:
                d_hidden.sub_(mean_row, alpha=smoothing)
        if need_weight:
            d_weight.index_add_(0, targets, hidden, alpha=-sharpness)
            if smoothing:
                d_weight.sub_(hidden.sum(0), alpha=smoothing / vocab)
        if need_bias:
            d_bias.index_add_(0, targets, d_bias.new_full(targets.shape, -sharpness))
            d_bias.sub_(smoothing * rows / vocab)
        ctx.save_for_backward(d_hidden, d_weight, d_bias)
        ctx.rows = rows
        return losses.mean()

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor) -> tuple[Tensor | None, ...]:
        scale = grad_loss / ctx.rows
        gradients = tuple(None if d is None else d * scale for d in ctx.saved_tensors)
        return (*gradients, None, None, None)
