import gzip
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scratchformer.data.batching import (
    TokenStream,
    fixed_size_batches,
    lm_batch,
    lm_eval_blocks,
    pad_batch,
    token_budget_batches,
    token_dtype,
)


def test_pad_batch_pads_right_or_left_and_marks_real_tokens() -> None:
    ids, mask = pad_batch([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and ids.dtype == torch.long
    assert mask.tolist() == [[True, True, True], [True, False, False]]
    ids, mask = pad_batch([[5, 6, 7], [8]], pad_id=1, left=True)
    assert ids.tolist() == [[5, 6, 7], [1, 1, 8]]
    assert mask.tolist() == [[True, True, True], [False, False, True]]


def test_pad_batch_of_nothing_is_empty() -> None:
    ids, mask = pad_batch([], 0)
    assert ids.shape == mask.shape == (0, 0)


batch_plans = st.fixed_dictionaries(
    {
        "lengths": st.lists(st.integers(1, 64), max_size=300),
        "max_tokens": st.integers(64, 1024),
        "max_sentences": st.none() | st.integers(1, 40),
        "seed": st.integers(0, 2**32 - 1),
        "epoch": st.integers(0, 100),
        "shuffle": st.booleans(),
    }
)


@settings(max_examples=200, deadline=None)
@given(batch_plans)
def test_token_budget_batches_use_every_index_once_within_budget(plan: dict) -> None:
    lengths = plan.pop("lengths")
    batches = token_budget_batches(lengths, **plan)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert batch and len(batch) * max(lengths[i] for i in batch) <= plan["max_tokens"]
        assert plan["max_sentences"] is None or len(batch) <= plan["max_sentences"]
    assert token_budget_batches(lengths, **plan) == batches


def test_token_budget_batches_change_with_epoch_and_seed_only() -> None:
    lengths = np.random.default_rng(0).integers(1, 50, size=500).tolist()

    def plan(seed: int, epoch: int) -> list[list[int]]:
        return token_budget_batches(lengths, 400, seed=seed, epoch=epoch)

    assert plan(0, 0) == plan(0, 0)
    assert plan(0, 0) != plan(0, 1) and plan(0, 0) != plan(1, 0)
    ordered = token_budget_batches(lengths, 400, shuffle=False)
    longest = [max(lengths[i] for i in batch) for batch in ordered]
    assert longest == sorted(longest)


def test_an_example_over_the_budget_is_an_error() -> None:
    with pytest.raises(ValueError, match="example 1 has 30 tokens"):
        token_budget_batches([5, 30, 8], max_tokens=20)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 200), st.integers(1, 50), st.booleans(), st.booleans(), st.integers(0, 9))
def test_fixed_size_batches_cover_the_indices(
    n: int, batch_size: int, shuffle: bool, drop_last: bool, epoch: int
) -> None:
    batches = fixed_size_batches(n, batch_size, shuffle=shuffle, epoch=epoch, drop_last=drop_last)
    flat = sorted(i for batch in batches for i in batch)
    assert len(flat) == len(set(flat)) and set(flat) <= set(range(n))
    assert len(flat) == (n - n % batch_size if drop_last else n)
    assert all(len(batch) == batch_size for batch in batches[:-1])
    assert batches == fixed_size_batches(
        n, batch_size, shuffle=shuffle, epoch=epoch, drop_last=drop_last
    )


def test_bucketing_wastes_far_less_padding_than_random_batches_on_multi30k(data_dir) -> None:
    with gzip.open(data_dir / "multi30k/train.de.gz", "rt", encoding="utf-8") as file:
        lengths = [len(line.split()) + 2 for line in file]  # words + bos/eos
    bucketed = token_budget_batches(lengths, max_tokens=1024, seed=3)
    batch_size = round(len(lengths) / len(bucketed))
    random = fixed_size_batches(len(lengths), batch_size, seed=3)
    assert padding_fraction(bucketed, lengths) < 0.02
    assert padding_fraction(random, lengths) > 0.3


def padding_fraction(batches: list[list[int]], lengths: list[int]) -> float:
    """The fraction of the padded positions of ``batches`` that are padding."""
    real = sum(lengths[i] for batch in batches for i in batch)
    padded = sum(len(batch) * max(lengths[i] for i in batch) for batch in batches)
    return 1 - real / padded


def test_lm_batch_windows_are_shifted_by_one_and_reproducible() -> None:
    stream = TokenStream(np.arange(1000))
    x, y = lm_batch(stream, 8, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(y, x + 1)  # consecutive ids, so the shift shows as +1
    assert torch.equal(x[:, 1:], x[:, :-1] + 1)
    again, _ = lm_batch(stream, 8, 16, torch.Generator().manual_seed(0))
    other, _ = lm_batch(stream, 8, 16, torch.Generator().manual_seed(1))
    assert torch.equal(x, again) and not torch.equal(x, other)
    y[:, 0] = -100  # masking targets in place leaves the inputs alone
    assert (x >= 0).all()
    last, _ = lm_batch(TokenStream(np.arange(17)), 4, 16)
    assert torch.equal(last, torch.arange(16).expand(4, 16))  # the only window
    with pytest.raises(ValueError, match="too short"):
        lm_batch(TokenStream(np.arange(16)), 1, 16)


def test_token_stream_maps_a_token_file(tmp_path: Path) -> None:
    ids = np.random.default_rng(0).integers(0, 50_000, size=5_000)
    ids.astype(token_dtype(50_000)).tofile(tmp_path / "train.bin")
    opened = TokenStream.open(tmp_path / "train.bin", np.uint16)
    assert isinstance(opened.ids, np.memmap) and opened.ids.dtype == np.uint16
    assert np.array_equal(opened.ids, ids) and len(opened) == len(ids)
    x, y = lm_batch(opened, 4, 32, torch.Generator().manual_seed(0))
    assert x.dtype == torch.int64 and torch.equal(x[:, 1:], y[:, :-1])


def test_token_dtype_and_file_errors(tmp_path: Path) -> None:
    assert token_dtype(65_535) == np.uint16 and token_dtype(65_536) == np.uint32
    with pytest.raises(FileNotFoundError, match="missing"):
        TokenStream.open(tmp_path / "missing.bin", np.uint16)
    (tmp_path / "odd.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ValueError, match="odd"):
        TokenStream.open(tmp_path / "odd.bin", np.uint16)
    with pytest.raises(ValueError, match="1-D integer"):
        TokenStream(np.zeros((2, 3), dtype=np.int64))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 300), st.integers(1, 8), st.integers(1, 40))
def test_lm_eval_blocks_predict_every_token_once_in_order(
    n: int, batch_size: int, block_size: int
) -> None:
    stream = TokenStream(np.arange(n))
    blocks = list(lm_eval_blocks(stream, batch_size, block_size))
    for x, y in blocks:
        assert x.shape == y.shape and x.shape[0] <= batch_size and x.shape[1] <= block_size
        assert torch.equal(y, x + 1)
    xs = [int(i) for x, _ in blocks for i in x.flatten()]
    assert xs == list(range(max(n - 1, 0)))
