"""BERT's masking of input tokens for masked-language-model pretraining.

Each batch is masked afresh (dynamic masking, as RoBERTa does) from a generator the
caller seeds, so a batch and its masks are a function of ``(seed, index)`` and a resumed
run masks exactly as an unbroken one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

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
) -> tuple[Tensor, Tensor]:
    """``(inputs, chosen)`` for ``(batch, seq)`` token ``ids``: each token that is not
    special is chosen with ``probability`` (``chosen`` is True there: the positions to
    predict); chosen tokens are replaced as :data:`REPLACE_WITH_MASK` says. Random
    replacements are drawn from the tokens that are not special.

    With ``word_starts`` (a ``(vocab,)`` boolean table: the token begins a word), whole
    words are chosen: a word's pieces take the draw of its first piece.
    """
    if not 0.0 < probability < 1.0:
        raise ValueError(f"mask probability={probability} must be between 0 and 1")
    specials = torch.tensor(list(special_ids), dtype=ids.dtype)
    maskable = ~torch.isin(ids, specials)
    draws = torch.rand(ids.shape, generator=generator)
    if word_starts is not None:
        draws = draws.gather(1, _word_first_piece(ids, word_starts, maskable))
    chosen = maskable & (draws < probability)
    how = torch.rand(ids.shape, generator=generator)
    to_mask = chosen & (how < REPLACE_WITH_MASK)
    to_random = chosen & (how >= REPLACE_WITH_MASK) & (how < (1 + REPLACE_WITH_MASK) / 2)
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[specials] = False
    candidates = ordinary.nonzero().squeeze(1)
    random = candidates[torch.randint(len(candidates), ids.shape, generator=generator)]
    inputs = torch.where(to_random, random, ids.masked_fill(to_mask, mask_id))
    return inputs, chosen


def _word_first_piece(ids: Tensor, word_starts: Tensor, maskable: Tensor) -> Tensor:
    """For every position, the position of the first piece of its word: a piece that does
    not start a word belongs to the word before it (special tokens start their own)."""
    starts = word_starts[ids] | ~maskable
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    first = torch.where(starts, positions, torch.zeros_like(positions))
    return first.cummax(dim=1).values
