"""The attention of a trained model on one input, ready to draw: the task encodes the text
as in training, the model runs once with ``need_weights=True``."""

from __future__ import annotations

import torch
from torch import nn

from ..tasks.base import Attentions, Task, TokenLabels
from .maps import AttentionMaps


@torch.no_grad()
def capture_attention(
    task: Task, model: nn.Module, text: str, target: str | None = None
) -> AttentionMaps:
    """The attention weights of ``model`` on ``text``, every layer and head, with the input
    encoded as the task encodes it for training (see the tasks' ``attention``).

    A translation model reads ``text`` as the source and ``target`` as the output (its own
    greedy translation when ``target`` is None); its decoder queries are the decoder's
    inputs, BOS first. A classifier of sentence pairs takes ``"first<TAB>second"``; a
    similarity model (a bi-encoder) one sentence, as it encodes each alone; a tagger reads
    words split on whitespace.
    """
    if not text.strip():
        raise ValueError("the text is empty: give the model something to attend to")
    was_training = model.training
    model.eval()
    try:
        return _maps(*task.attention(model, text, target))
    finally:
        model.train(was_training)


def _maps(attentions: Attentions, tokens: TokenLabels) -> AttentionMaps:
    """Stack each kind's per-layer ``(1, heads, q, k)`` weights into ``(layers, heads, q, k)``."""
    weights = {kind: torch.cat(attentions[kind]).float().cpu() for kind in tokens}
    return AttentionMaps(
        weights,
        queries={kind: queries for kind, (queries, _) in tokens.items()},
        keys={kind: keys for kind, (_, keys) in tokens.items()},
    )
