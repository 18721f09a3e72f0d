"""BERT's masking: how many tokens are chosen, what becomes of them, whole words, spans."""

from __future__ import annotations

import pytest
import torch

from scratchformer.data.masking import REPLACE_WITH_MASK, mask_tokens

SPECIALS = (0, 1, 2, 3, 4)
MASK_ID = 4
VOCAB = 5000


def masked(ids: torch.Tensor, seed: int = 0, **options) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return mask_tokens(
        ids, generator, mask_id=MASK_ID, special_ids=SPECIALS, vocab_size=VOCAB, **options
    )


def ordinary_ids(rows: int = 400, length: int = 250) -> torch.Tensor:
    return torch.randint(len(SPECIALS), VOCAB, (rows, length), generator=torch.Generator())


def test_fifteen_percent_are_chosen_and_split_80_10_10() -> None:
    ids = ordinary_ids()  # 100,000 tokens: the shares' standard errors are about 0.1%
    inputs, chosen = masked(ids)
    assert chosen.float().mean().item() == pytest.approx(0.15, abs=0.005)
    to_mask = (inputs == MASK_ID) & chosen
    kept = (inputs == ids) & chosen
    replaced = chosen & ~to_mask & ~kept
    count = chosen.sum().item()
    assert to_mask.sum().item() / count == pytest.approx(REPLACE_WITH_MASK, abs=0.01)
    assert kept.sum().item() / count == pytest.approx(0.1, abs=0.01)
    assert replaced.sum().item() / count == pytest.approx(0.1, abs=0.01)
    assert torch.equal(inputs[~chosen], ids[~chosen])  # the rest untouched
    assert not torch.isin(inputs[replaced], torch.tensor(SPECIALS)).any()


def test_special_tokens_are_never_chosen() -> None:
    ids = ordinary_ids(50, 100)
    ids[:, 0], ids[:, -1], ids[:, 50] = 2, 3, 0  # [CLS] ... [PAD] ... [SEP]
    inputs, chosen = masked(ids, probability=0.9)
    for column in (0, 50, -1):
        assert not chosen[:, column].any()
        assert torch.equal(inputs[:, column], ids[:, column])


def test_the_same_seed_masks_the_same_way_and_another_seed_does_not() -> None:
    ids = ordinary_ids(8, 64)
    first, again, other = masked(ids, 7), masked(ids, 7), masked(ids, 8)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[1], other[1])


def test_whole_word_masking_chooses_all_pieces_of_a_word_or_none() -> None:
    word_starts = torch.ones(VOCAB, dtype=torch.bool)
    word_starts[1000:] = False  # ids from 1000 on continue a word
    generator = torch.Generator().manual_seed(1)
    starts = torch.randint(len(SPECIALS), 1000, (200, 120), generator=generator)
    pieces = torch.randint(1000, VOCAB, (200, 120), generator=generator)
    ids = torch.where(torch.rand(200, 120, generator=generator) < 0.5, starts, pieces)
    ids[:, 0] = 2  # [CLS]: a continuation after it starts no word of its own
    _, chosen = masked(ids, word_starts=word_starts)
    continues = ~word_starts[ids]
    continues[:, 0] = False
    # a continuing piece after a real token is chosen exactly when the piece before it is
    follows_word = continues[:, 1:] & (ids[:, :-1] != 2)
    assert torch.equal(chosen[:, 1:][follows_word], chosen[:, :-1][follows_word])
    assert chosen.float().mean().item() == pytest.approx(0.15, abs=0.02)


def runs(chosen: torch.Tensor) -> torch.Tensor:
    """The lengths of the runs of consecutive chosen positions of every row."""
    edges = torch.nn.functional.pad(chosen.int(), (1, 1)).diff(dim=1)
    return (edges == -1).nonzero()[:, 1] - (edges == 1).nonzero()[:, 1]


@pytest.mark.parametrize("mean", [2.0, 3.8])
def test_spans_cover_the_probability_in_runs_of_the_mean_length(mean: float) -> None:
    ids = ordinary_ids(800, 125)  # 100,000 tokens in windows of pretraining's length
    _, chosen = masked(ids, mean_span=mean)
    assert chosen.float().mean().item() == pytest.approx(0.15, abs=0.006)
    assert chosen[:, :3].float().mean().item() == pytest.approx(0.15, abs=0.02)  # no edge
    # rarely chosen, spans seldom touch: a run is one span, of the clipped geometric mean
    _, sparse = masked(ids, probability=0.02, mean_span=mean)
    assert runs(sparse).float().mean().item() == pytest.approx(mean, rel=0.08)
    assert runs(sparse).max().item() <= 10 + 2  # clipped at 10 (two spans rarely touch)


def test_every_token_of_a_span_is_replaced_alike() -> None:
    ids = ordinary_ids()
    inputs, chosen = masked(ids, probability=0.05, mean_span=3.0)
    kind = torch.where(inputs == MASK_ID, 0, torch.where(inputs == ids, 1, 2))
    pairs = chosen[:, 1:] & chosen[:, :-1]
    alike = (kind[:, 1:][pairs] == kind[:, :-1][pairs]).float().mean().item()
    assert alike > 0.97  # 0.8^2 + 0.1^2 + 0.1^2 = 0.66 were tokens replaced each alone
    count = chosen.sum().item()
    assert ((inputs == MASK_ID) & chosen).sum().item() / count == pytest.approx(0.8, abs=0.03)


def test_spans_of_whole_words_take_all_the_pieces_of_each_word() -> None:
    word_starts = torch.ones(VOCAB, dtype=torch.bool)
    word_starts[1000:] = False
    generator = torch.Generator().manual_seed(2)
    starts = torch.randint(len(SPECIALS), 1000, (400, 125), generator=generator)
    pieces = torch.randint(1000, VOCAB, (400, 125), generator=generator)
    ids = torch.where(torch.rand(400, 125, generator=generator) < 0.7, starts, pieces)
    ids[:, 0] = 2
    _, chosen = masked(ids, word_starts=word_starts, mean_span=3.0)
    continues = ~word_starts[ids[:, 1:]] & (ids[:, :-1] != 2)
    assert torch.equal(chosen[:, 1:][continues], chosen[:, :-1][continues])
    assert chosen.float().mean().item() == pytest.approx(0.15, abs=0.01)


def test_a_probability_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"mask probability=1\.0"):
        masked(ordinary_ids(2, 4), probability=1.0)


def test_a_mean_span_outside_one_to_ten_is_refused() -> None:
    for mean in (0.5, 10.0):
        with pytest.raises(ValueError, match=rf"mean span={mean} must be at least 1"):
            masked(ordinary_ids(2, 4), mean_span=mean)
