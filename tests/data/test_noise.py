"""T5's span corruption: the noise mask's statistics, the lengths, and the round trip.
BART's text infilling: the spans' statistics, and the kept tokens in order."""

from __future__ import annotations

import math

import pytest
import torch

from scratchformer.data.noise import (
    corrupt,
    corrupted_lengths,
    infill,
    noise_counts,
    random_spans_noise_mask,
    raw_length,
    span_lengths,
)

SENTINELS = list(range(1000, 1100))
EOS = 1


def spans_of(mask: torch.Tensor) -> list[int]:
    """The lengths of the runs of True in ``mask``."""
    runs, length = [], 0
    for flag in [*mask.tolist(), False]:
        if flag:
            length += 1
        elif length:
            runs.append(length)
            length = 0
    return runs


def uncorrupt(inputs: list[int], targets: list[int]) -> list[int]:
    """The text back: each sentinel of the inputs replaced by what follows it in the targets."""
    assert inputs[-1] == targets[-1] == EOS
    spans: dict[int, list[int]] = {}
    for token in targets[:-1]:
        if token in SENTINELS:
            span = spans[token] = []
        else:
            span.append(token)
    text = []
    for token in inputs[:-1]:
        text += spans.pop(token) if token in SENTINELS else [token]
    assert not spans, "every span is used once"
    return text


def test_the_counts_follow_t5() -> None:
    assert noise_counts(100, 0.15, 3.0) == (15, 5)
    assert noise_counts(114, 0.15, 3.0) == (17, 6)
    assert noise_counts(2, 0.15, 3.0) == (1, 1)  # at least one noise token
    assert noise_counts(10, 0.99, 3.0) == (9, 1)  # at least one kept token
    assert noise_counts(10, 0.8, 1.0) == (8, 2)  # no more spans than kept tokens between them
    with pytest.raises(ValueError, match="too short"):
        noise_counts(1, 0.15, 3.0)


def test_raw_length_is_the_longest_that_fits() -> None:
    # T5's compute_input_and_target_lengths(512, 0.15, 3.0) gives 568 tokens, 114 targets
    assert raw_length(512, 0.15, 3.0) == 568
    assert corrupted_lengths(568, 0.15, 3.0) == (512, 114)
    for wanted in (3, 10, 50, 100):
        length = raw_length(wanted, 0.15, 3.0)
        assert corrupted_lengths(length, 0.15, 3.0)[0] <= wanted
        assert corrupted_lengths(length + 1, 0.15, 3.0)[0] > wanted
    with pytest.raises(ValueError, match="no room"):
        raw_length(2, 0.15, 3.0)


@pytest.mark.parametrize("length", [2, 3, 7, 57, 114])
def test_a_mask_has_the_counted_noise_in_spans_starting_with_kept_tokens(length: int) -> None:
    generator = torch.Generator().manual_seed(length)
    noise, spans = noise_counts(length, 0.15, 3.0)
    for _ in range(20):
        mask = random_spans_noise_mask(length, 0.15, 3.0, generator)
        assert mask.shape == (length,) and mask.dtype == torch.bool
        assert int(mask.sum()) == noise and len(spans_of(mask)) == spans
        assert not mask[0], "the text starts with kept tokens"


def test_noise_share_and_span_length_over_many_draws() -> None:
    generator = torch.Generator().manual_seed(0)
    masks = [random_spans_noise_mask(568, 0.15, 3.0, generator) for _ in range(500)]
    share = torch.stack(masks).float().mean().item()
    lengths = [length for mask in masks for length in spans_of(mask)]
    assert share == pytest.approx(85 / 568)  # round(568 * 0.15), exactly, in every draw
    assert sum(lengths) / len(lengths) == pytest.approx(85 / 28)  # 28 spans of 85 tokens
    assert len(set(lengths)) > 5, "span lengths vary"
    starts = torch.stack([mask.int().diff() == 1 for mask in masks]).float().mean(0)
    assert starts[10:-10].std().item() < 0.02, "spans start anywhere alike"


def test_the_same_seed_draws_the_same_mask() -> None:
    draw = lambda seed: random_spans_noise_mask(100, 0.15, 3.0, torch.Generator().manual_seed(seed))  # noqa: E731
    assert torch.equal(draw(3), draw(3))
    assert not all(torch.equal(draw(3), draw(seed)) for seed in range(4, 10))


def test_corruption_replaces_spans_by_sentinels_and_round_trips() -> None:
    ids = [11, 12, 13, 14, 15, 16, 17]
    mask = torch.tensor([False, True, True, False, False, True, False])
    inputs, targets = corrupt(ids, mask, SENTINELS, EOS)
    assert inputs == [11, 1000, 14, 15, 1001, 17, EOS]
    assert targets == [1000, 12, 13, 1001, 16, EOS]
    generator = torch.Generator().manual_seed(1)
    for length in (2, 5, 40, 113):
        ids = torch.randint(2, 900, (length,), generator=generator).tolist()
        mask = random_spans_noise_mask(length, 0.15, 3.0, generator)
        inputs, targets = corrupt(ids, mask, SENTINELS, EOS)
        assert (len(inputs), len(targets)) == corrupted_lengths(length, 0.15, 3.0)
        assert uncorrupt(inputs, targets) == ids


def test_too_few_sentinels_is_an_error() -> None:
    mask = torch.tensor([False, True, False, True, False])
    with pytest.raises(ValueError, match="2 noise spans need more than the 1 sentinels"):
        corrupt([5, 6, 7, 8, 9], mask, SENTINELS[:1], EOS)


MASK = 10_000


def test_poisson_spans_hide_the_budget_exactly_at_the_mean_length() -> None:
    generator = torch.Generator().manual_seed(0)
    assert span_lengths(0, 3.5, generator) == []
    for budget in (1, 7, 40):
        assert sum(span_lengths(budget, 3.5, generator)) == budget
    drawn = span_lengths(20_000, 3.5, generator)
    assert sum(drawn) / len(drawn) == pytest.approx(3.5, abs=0.1)  # the cut last one: noise
    assert sum(n == 0 for n in drawn) / len(drawn) == pytest.approx(math.exp(-3.5), abs=0.01)


def test_infilling_hides_its_share_in_spans_of_one_mask_and_keeps_the_rest_in_order() -> None:
    generator = torch.Generator().manual_seed(1)
    hidden = masks = tokens = 0
    for sentence in range(500):
        ids = list(range(1, 2 + sentence % 40))
        noised = infill(ids, MASK, 0.35, 3.5, generator)
        kept = [token for token in noised if token != MASK]
        assert kept == [token for token in ids if token in kept]  # in order, none repeated
        assert len(ids) - len(kept) == round(0.35 * len(ids))  # exactly the share, rounded
        assert "MASK MASK" not in " ".join("MASK" if t == MASK else "t" for t in noised)
        hidden, masks, tokens = (
            hidden + len(ids) - len(kept),
            masks + noised.count(MASK),
            tokens + len(ids),
        )
    assert hidden / tokens == pytest.approx(0.35, abs=0.01)
    assert 2.5 < hidden / masks < 3.5  # Poisson(3.5) spans, the last of each cut short


def test_deletion_drops_its_share_of_the_kept_tokens_without_a_trace() -> None:
    generator = torch.Generator().manual_seed(2)
    ids = list(range(1, 1001))
    noised = infill(ids, MASK, 0.0, 3.5, generator, delete_ratio=0.1)
    assert MASK not in noised and noised == sorted(noised)
    assert len(noised) == pytest.approx(900, abs=30)


def test_the_same_seed_draws_the_same_infilling() -> None:
    ids = list(range(1, 30))
    draws = [infill(ids, MASK, 0.35, 3.5, torch.Generator().manual_seed(s)) for s in (5, 5, 6)]
    assert draws[0] == draws[1] != draws[2]
