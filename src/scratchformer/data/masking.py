"""BERT's masking of input tokens for masked-language-model pretraining, and SpanBERT's.

Each batch is masked afresh (dynamic masking, as RoBERTa does) from a generator the
caller seeds, so a batch and its masks are a function of ``(seed, index)`` and a resumed
run masks exactly as an unbroken one.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..config import MAX_MASK_SPAN

REPLACE_WITH_MASK = 0.8
"""Of the chosen tokens, the share replaced by ``[MASK]``; half of the rest become a random
token, the other half stay as they are (BERT's 80/10/10)."""


def mask_tokens(
    ids: Tensor,
    generator: torch.Generator,
    *,
    mask_id: int,
    special_ids: Sequence[int],
    vocab_size: int,
    probability: float = 0.15,
    word_starts: Tensor | None = None,
    mean_span: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """``(inputs, chosen)`` for ``(batch, seq)`` token ``ids``: each token that is not
    special is chosen with ``probability`` (``chosen`` is True there: the positions to
    predict); chosen tokens are replaced as :data:`REPLACE_WITH_MASK` says. Random
    replacements are drawn from the tokens that are not special.

    With ``word_starts`` (a ``(vocab,)`` boolean table: the token begins a word), whole
    words are chosen: a word's pieces take the draw of its first piece.

    With ``mean_span`` above 1, contiguous spans of words (or of pieces, without
    ``word_starts``) are chosen, as SpanBERT (Joshi et al., 2020) does: their lengths are
    geometric, clipped at :data:`MAX_MASK_SPAN`, with this mean; they start where the expected
    share of tokens chosen is ``probability``; and every token of a span is replaced alike.
    """
    if not 0.0 < probability < 1.0:
        raise ValueError(f"mask probability={probability} must be between 0 and 1")
    if not 1.0 <= mean_span < MAX_MASK_SPAN:
        raise ValueError(f"mean span={mean_span} must be at least 1 and below {MAX_MASK_SPAN}")
    specials = torch.tensor(list(special_ids), dtype=ids.dtype)
    maskable = ~torch.isin(ids, specials)
    starts = torch.ones_like(maskable) if word_starts is None else word_starts[ids] | ~maskable
    how_from = None
    if mean_span > 1.0:
        covered, how_from = _spans(starts, generator, probability, mean_span)
    else:
        draws = torch.rand(ids.shape, generator=generator)
        covered = draws.gather(1, _unit_first_position(starts)) < probability
    chosen = maskable & covered
    how = torch.rand(ids.shape, generator=generator)
    if how_from is not None:
        how = how.gather(1, how_from)
    to_mask = chosen & (how < REPLACE_WITH_MASK)
    to_random = chosen & (how >= REPLACE_WITH_MASK) & (how < (1 + REPLACE_WITH_MASK) / 2)
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[specials] = False
    candidates = ordinary.nonzero().squeeze(1)
    random = candidates[torch.randint(len(candidates), ids.shape, generator=generator)]
    inputs = torch.where(to_random, random, ids.masked_fill(to_mask, mask_id))
    return inputs, chosen


def _unit_first_position(starts: Tensor) -> Tensor:
    """For every position, the position where its unit (word or piece) begins, given
    ``starts``, True at each unit's first position."""
    positions = torch.arange(starts.shape[1]).expand_as(starts)
    return torch.where(starts, positions, torch.zeros_like(positions)).cummax(dim=1).values


def _spans(
    starts: Tensor, generator: torch.Generator, probability: float, mean: float
) -> tuple[Tensor, Tensor]:
    """``(covered, first)`` for ``(batch, seq)`` unit ``starts`` (True where a word, a
    piece or a special token begins): whether a span covers each position, and the first
    position of the span that does (of the latest-starting one where spans overlap).

    Spans may also start in :data:`MAX_MASK_SPAN` - 1 units before the row, so that its first
    tokens are chosen as often as the rest."""
    stop, rate = _span_rates(probability, mean)
    before = MAX_MASK_SPAN - 1
    starts = torch.cat([starts.new_ones(starts.shape[0], before), starts], dim=1)
    length = starts.shape[1]
    begins = starts & (torch.rand(starts.shape, generator=generator) < rate)
    uniform = torch.rand(starts.shape, generator=generator)
    lengths = (uniform.log() / math.log1p(-stop)).floor().add(1).clamp(max=MAX_MASK_SPAN).long()
    unit = starts.long().cumsum(1) - 1  # the unit of every position
    positions = torch.arange(length).expand_as(unit)

    def per_unit(values: Tensor) -> Tensor:
        """``values`` at each unit's first position, indexed by unit."""
        at_starts = torch.where(starts, values, torch.zeros_like(values))
        return torch.zeros_like(values).scatter_reduce(1, unit, at_starts, "amax")

    begins_u, lengths_u, first_u = per_unit(begins.long()), per_unit(lengths), per_unit(positions)
    owner = torch.full_like(unit, -1)  # per unit: the unit whose span covers it
    for k in reversed(range(MAX_MASK_SPAN)):  # nearer starts last: the latest span owns a unit
        # unit j's span covers unit j + k if it begins at j and is longer than k (units are
        # numbered as positions are, so positions[:, j] is j)
        covers = (begins_u[:, : length - k] == 1) & (lengths_u[:, : length - k] > k)
        owner[:, k:] = torch.where(covers, positions[:, : length - k], owner[:, k:])
    owner = owner.gather(1, unit)
    first = torch.where(owner >= 0, first_u.gather(1, owner.clamp(min=0)), positions)
    return (owner >= 0)[:, before:], (first[:, before:] - before).clamp(min=0)


@functools.cache
def _span_rates(probability: float, mean: float) -> tuple[float, float]:
    """``(stop, rate)``: the geometric distribution's success probability whose lengths,
    clipped at :data:`MAX_MASK_SPAN`, average ``mean``; and the probability that a span starts
    at a unit such that a unit is covered with ``probability``. Solved once a run."""
    stop = _solve(lambda p: (1 - (1 - p) ** MAX_MASK_SPAN) / p - mean, 1e-9, 1.0)
    longer = [(1 - stop) ** k for k in range(MAX_MASK_SPAN)]  # P(length > k)
    rate = _solve(lambda q: probability - 1 + math.prod(1 - q * s for s in longer), 0.0, 1.0)
    return stop, rate


def _solve(f: Callable[[float], float], low: float, high: float) -> float:
    """The root of ``f``, decreasing on ``[low, high]``, by bisection."""
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if f(middle) > 0 else (low, middle)
    return (low + high) / 2
