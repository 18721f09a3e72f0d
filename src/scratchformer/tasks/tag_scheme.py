"""Tag sequences that obey the IOB2 scheme: ``I-X`` continues an entity, so only ``B-X``
or ``I-X`` may come before it. Each word's most likely tag can break that (``O I-PER``),
and an entity scorer must then guess where entities start; decoding the most likely valid
sequence (Viterbi over the words' tag log-probabilities, with the forbidden transitions
removed) predicts whole entities instead."""

from __future__ import annotations

from functools import cache

import torch
from torch import Tensor


def may_follow(previous: str | None, tag: str) -> bool:
    """Whether IOB2 allows ``tag`` right after ``previous`` (``None``: the sentence start)."""
    if not tag.startswith("I-"):
        return True
    return previous is not None and previous[:2] in ("B-", "I-") and previous[2:] == tag[2:]


@cache
def iob2_transitions(labels: tuple[str, ...]) -> Tensor:
    """Booleans ``(len(labels) + 1, len(labels))``: row ``i`` says which tags may follow
    tag ``i``, the last row which may open a sentence."""
    before: list[str | None] = [*labels, None]
    return torch.tensor([[may_follow(p, tag) for tag in labels] for p in before])


def best_valid_tags(log_probs: Tensor, lengths: Tensor, allowed: Tensor) -> list[list[int]]:
    """For each sentence of ``log_probs`` ``(sentences, words, tags)`` (padded; ``lengths``
    real words each), the tag ids of the sequence with the highest total log-probability
    among those ``allowed`` (see :func:`iob2_transitions`) permits: Viterbi, a batch at a
    time. When the per-word argmax is allowed, it is that sequence."""
    sentences, words, tags = log_probs.shape
    if words == 0:
        return [[] for _ in range(sentences)]
    penalty = torch.zeros(allowed.shape, dtype=log_probs.dtype).masked_fill(~allowed, -torch.inf)
    stay = torch.arange(tags).expand(sentences, tags)  # past a sentence's end: keep the tag
    score = log_probs[:, 0] + penalty[-1]
    pointers = []
    for word in range(1, words):
        best, previous = (score[:, :, None] + penalty[:-1]).max(1)  # best predecessor per tag
        real = (word < lengths)[:, None]
        score = torch.where(real, best + log_probs[:, word], score)
        pointers.append(torch.where(real, previous, stay))
    tag = score.argmax(-1)
    path = [tag]
    for previous in reversed(pointers):
        tag = previous.gather(1, tag[:, None]).squeeze(1)
        path.append(tag)
    paths = torch.stack(path[::-1], 1).tolist()
    return [row[:length] for row, length in zip(paths, lengths.tolist(), strict=True)]
