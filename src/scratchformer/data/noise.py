"""T5's span corruption (Raffel et al., 2020, section 3.1.4): random spans of a text are
replaced by sentinel tokens in the input, and the target spells out the spans.

``The cute dog walks in the park`` with ``cute dog`` and ``the`` chosen becomes the input
``The <extra_id_0> walks in <extra_id_1> park </s>`` and the target
``<extra_id_0> cute dog <extra_id_1> the </s>``. Which tokens are noise follows T5's
``random_spans_noise_mask``: the number of noise tokens and of spans are fixed by the
length, and the noise and the other tokens are each cut into that many random non-empty
runs, interleaved starting with a run of kept tokens. Draws come from a generator the
caller seeds, so a batch's noise is a function of ``(seed, index)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def noise_counts(length: int, density: float, mean_span_length: float) -> tuple[int, int]:
    """``(noise tokens, noise spans)`` of a text of ``length`` tokens: ``length * density``
    rounded, at least 1 and at most ``length - 1``, in ``noise / mean_span_length`` spans
    (rounded, at least 1, and no more than the kept tokens, which separate them)."""
    if length < 2:
        raise ValueError(f"a text of {length} token(s) is too short to corrupt (2 at least)")
    noise = min(max(round(length * density), 1), length - 1)
    spans = min(max(round(noise / mean_span_length), 1), length - noise)
    return noise, spans


def corrupted_lengths(length: int, density: float, mean_span_length: float) -> tuple[int, int]:
    """``(input, target)`` lengths of a corrupted text of ``length`` tokens: the kept
    tokens and the noise each with one sentinel a span, plus eos."""
    noise, spans = noise_counts(length, density, mean_span_length)
    return length - noise + spans + 1, noise + spans + 1


def raw_length(input_length: int, density: float, mean_span_length: float) -> int:
    """The longest text whose corrupted input has at most ``input_length`` tokens (T5's
    ``compute_input_and_target_lengths``): the window to cut from a corpus so that inputs
    fit the model."""
    if corrupted_lengths(2, density, mean_span_length)[0] > input_length:
        raise ValueError(f"inputs of {input_length} tokens leave no room for a corrupted text")
    length = 2
    while corrupted_lengths(length + 1, density, mean_span_length)[0] <= input_length:
        length += 1
    return length


def random_spans_noise_mask(
    length: int, density: float, mean_span_length: float, generator: torch.Generator
) -> Tensor:
    """A ``(length,)`` boolean mask, True at noise tokens, as :func:`noise_counts` says."""
    noise, spans = noise_counts(length, density, mean_span_length)
    noise_lengths = _random_segmentation(noise, spans, generator)
    kept_lengths = _random_segmentation(length - noise, spans, generator)
    run_lengths = torch.stack([kept_lengths, noise_lengths], dim=1).flatten()
    run_starts = torch.zeros(length, dtype=torch.long)
    run_starts[run_lengths.cumsum(0)[:-1]] = 1
    return run_starts.cumsum(0) % 2 == 1  # runs alternate: kept, noise, kept, ...


def _random_segmentation(items: int, segments: int, generator: torch.Generator) -> Tensor:
    """The lengths of ``segments`` random non-empty runs that ``items`` are cut into: the
    cuts are ``segments - 1`` distinct positions among the ``items - 1`` between items."""
    cuts = torch.randperm(items - 1, generator=generator)[: segments - 1].sort().values + 1
    bounds = torch.cat([torch.tensor([0]), cuts, torch.tensor([items])])
    return bounds.diff()


def corrupt(
    ids: Sequence[int], noise: Tensor, sentinel_ids: Sequence[int], eos_id: int
) -> tuple[list[int], list[int]]:
    """``(inputs, targets)`` of ``ids`` with the ``noise`` mask: in the inputs each noise
    span becomes one sentinel (``sentinel_ids`` in order); the targets are each sentinel
    followed by its span; both end in eos."""
    inputs: list[int] = []
    targets: list[int] = []
    span = -1
    previous = False
    for token, is_noise in zip(ids, noise.tolist(), strict=True):
        starts_span = is_noise and not previous
        previous = is_noise
        if not is_noise:
            inputs.append(token)
            continue
        if starts_span:
            span += 1
            if span >= len(sentinel_ids):
                raise ValueError(
                    f"{span + 1} noise spans need more than the {len(sentinel_ids)} sentinels"
                )
            inputs.append(sentinel_ids[span])
            targets.append(sentinel_ids[span])
        targets.append(token)
    return [*inputs, eos_id], [*targets, eos_id]


def span_lengths(budget: int, poisson_lambda: float, generator: torch.Generator) -> list[int]:
    """Span lengths drawn from a Poisson distribution of mean ``poisson_lambda`` until they
    hide ``budget`` tokens, the last one cut so that they hide exactly that many (none for
    a budget of 0). Spans of length 0 are kept: each inserts a mask."""
    spans: list[int] = []
    hidden = 0
    rate = torch.tensor(float(poisson_lambda))
    while hidden < budget:
        spans.append(int(torch.poisson(rate, generator=generator)))
        hidden += spans[-1]
    if spans:
        spans[-1] -= hidden - budget
    return spans


def infill(
    ids: Sequence[int],
    mask_id: int,
    mask_ratio: float,
    poisson_lambda: float,
    generator: torch.Generator,
    delete_ratio: float = 0.0,
) -> list[int]:
    """BART's text infilling (Lewis et al. 2020, as mBART pretrains): ``mask_ratio`` of the
    tokens of ``ids`` (rounded) are hidden in spans of Poisson lengths
    (:func:`span_lengths`), each span becoming one ``mask_id``, so that the model must also
    tell how many tokens a mask hides; a span of length 0 inserts a mask. The spans go
    into distinct random gaps between the kept tokens, so none merge; if there are more
    spans than gaps, the last ones join the one before. With ``delete_ratio``, that share
    of the kept tokens is deleted outright (BART's token deletion)."""
    length = len(ids)
    budget = round(length * mask_ratio)
    kept = length - budget
    spans = span_lengths(budget, poisson_lambda, generator)
    while len(spans) > kept + 1:
        spans[-2] += spans.pop()
    gaps = torch.randperm(kept + 1, generator=generator)[: len(spans)].sort().values.tolist()
    span_at = dict(zip(gaps, spans, strict=True))
    deleted = (torch.rand(kept, generator=generator) < delete_ratio).tolist()
    noised: list[int] = []
    position = 0
    for gap in range(kept + 1):
        if gap in span_at:
            noised.append(mask_id)
            position += span_at[gap]
        if gap < kept:
            if not deleted[gap]:
                noised.append(ids[position])
            position += 1
    return noised
