"""Batches: padding, length-bucketed token-budget batches, and LM blocks.

Batch plans are lists of example indices, computed up front from the lengths, so an epoch
is fully determined by ``(seed, epoch)``: the same plan on every run and every rank.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from numpy.typing import ArrayLike, DTypeLike
from torch import Tensor


def pad_batch(
    sequences: Sequence[Sequence[int]], pad_id: int, *, left: bool = False
) -> tuple[Tensor, Tensor]:
    """Stack token id sequences into ``(batch, longest)`` ids and a mask (True = real token).

    ``left`` pads on the left, so that the sequences end together (as batched generation
    wants its prompts).
    """
    lengths = torch.tensor([len(seq) for seq in sequences], dtype=torch.long)
    length = int(lengths.max()) if len(sequences) else 0
    positions = torch.arange(length)
    mask = positions >= length - lengths[:, None] if left else positions < lengths[:, None]
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    ids[mask] = torch.tensor([t for seq in sequences for t in seq], dtype=torch.long)
    return ids, mask


def _rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch])


def token_budget_batches(
    lengths: Sequence[int] | np.ndarray,
    max_tokens: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    max_sentences: int | None = None,
) -> list[list[int]]:
    """Group example indices of similar length into batches of at most ``max_tokens``.

    A batch's cost is ``len(batch) * longest`` (its padded size), and never exceeds
    ``max_tokens``; ``max_sentences`` also caps the examples a batch holds. Examples are
    sorted by length, equal lengths in a random order, cut greedily into batches, and the
    batches are shuffled. Every index appears exactly once; the result is fixed by
    ``(seed, epoch)``. Without ``shuffle`` the batches go from shortest to longest (for
    evaluation). An example longer than ``max_tokens`` raises ``ValueError``: it fits in no
    batch, so filter or truncate long examples first, or raise the budget.
    """
    if max_sentences is not None and max_sentences < 1:
        raise ValueError(f"max_sentences={max_sentences} must be a positive integer")
    lengths = np.asarray(lengths, dtype=np.int64)
    too_long = np.flatnonzero(lengths > max_tokens)
    if too_long.size:
        i = int(too_long[0])
        raise ValueError(
            f"example {i} has {lengths[i]} tokens, more than max_tokens={max_tokens} "
            f"({too_long.size} such example(s)); filter or truncate them, or raise max_tokens"
        )
    rng = _rng(seed, epoch)
    order = rng.permutation(len(lengths)) if shuffle else np.arange(len(lengths))
    order = order[np.argsort(lengths[order], kind="stable")]
    cap = len(lengths) if max_sentences is None else max_sentences
    batches: list[list[int]] = []
    batch: list[int] = []
    for index in order.tolist():
        # sorted ascending, so this example is the longest of the batch it joins
        if batch and ((len(batch) + 1) * lengths[index] > max_tokens or len(batch) == cap):
            batches.append(batch)
            batch = []
        batch.append(index)
    if batch:
        batches.append(batch)
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def fixed_size_batches(
    n: int,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    drop_last: bool = False,
) -> list[list[int]]:
    """Indices ``0 .. n-1`` in batches of ``batch_size`` (shuffled by ``(seed, epoch)``)."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be a positive integer")
    order = _rng(seed, epoch).permutation(n) if shuffle else np.arange(n)
    stop = n - n % batch_size if drop_last else n
    return [order[i : i + batch_size].tolist() for i in range(0, stop, batch_size)]


# Language-model blocks ----------------------------------------------------------------------


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest dtype for a token file: uint16 below 65536 ids, else uint32."""
    return np.dtype(np.uint16 if vocab_size < 2**16 else np.uint32)


class TokenStream:
    """One long 1-D array of token ids (a corpus, documents joined), in memory or mapped.

    ``open`` maps a raw ``.bin`` file of ids (as nanoGPT writes them) without reading it,
    so a corpus larger than memory works. The file has no header: the reader must know the
    dtype (use :func:`token_dtype` of the tokenizer's vocab size).
    """

    def __init__(self, ids: ArrayLike) -> None:
        ids = ids if isinstance(ids, np.ndarray) else np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"token ids must be a 1-D integer array, got {ids.dtype} {ids.shape}")
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def open(cls, path: str | Path, dtype: DTypeLike) -> TokenStream:
        """Memory-map a ``.bin`` file of ids (read-only)."""
        path, dtype = Path(path), np.dtype(dtype)
        if not path.is_file():
            raise FileNotFoundError(f"token file not found: {path}")
        size = path.stat().st_size
        if size % dtype.itemsize:
            raise ValueError(f"{path} has {size} bytes, not a whole number of {dtype} ids")
        if size == 0:
            return cls(np.zeros(0, dtype=dtype))
        return cls(np.memmap(path, dtype=dtype, mode="r"))


def random_windows(
    stream: TokenStream, batch_size: int, length: int, generator: torch.Generator | None = None
) -> np.ndarray:
    """``(batch_size, length)`` windows of the stream at start positions drawn uniformly
    (with ``generator``, reproducibly), as in nanoGPT's ``get_batch``."""
    if len(stream) < length:
        raise ValueError(f"a stream of {len(stream)} tokens is too short for windows of {length}")
    starts = torch.randint(len(stream) - length + 1, (batch_size,), generator=generator)
    return stream.ids[starts.numpy()[:, None] + np.arange(length)]


def lm_batch(
    stream: TokenStream,
    batch_size: int,
    block_size: int,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Random windows for LM training: ``x = ids[i : i+block]``, ``y = ids[i+1 : i+1+block]``,
    both ``(batch_size, block_size)`` int64 (see :func:`random_windows`)."""
    if len(stream) <= block_size:
        raise ValueError(
            f"a stream of {len(stream)} tokens is too short for block_size={block_size}"
        )
    return _split_windows(random_windows(stream, batch_size, block_size + 1, generator))


def consecutive_windows(stream: TokenStream, batch_size: int, length: int) -> Iterator[np.ndarray]:
    """The stream cut into windows of ``length`` in order, ``batch_size`` at a time; the
    last window may be shorter and comes alone."""
    ids = stream.ids
    full = len(ids) // length
    for first in range(0, full, batch_size):
        stop = min(first + batch_size, full)
        yield np.asarray(ids[first * length : stop * length]).reshape(-1, length)
    if len(ids) > full * length:
        yield np.asarray(ids[None, full * length :])


def lm_eval_blocks(
    stream: TokenStream, batch_size: int, block_size: int
) -> Iterator[tuple[Tensor, Tensor]]:
    """Non-overlapping ``(x, y)`` blocks in order, so every token after the first is a
    target exactly once (an exact perplexity over the whole stream).

    Full blocks come ``batch_size`` at a time (the last such batch may be smaller); a final
    shorter block, if any, comes alone as a ``(1, rest)`` batch. Weight per-batch mean
    losses by ``y.numel()``.
    """
    ids = stream.ids
    targets = max(len(ids) - 1, 0)
    full = targets // block_size
    for first in range(0, full, batch_size):
        blocks = range(first, min(first + batch_size, full))
        index = np.array(blocks)[:, None] * block_size + np.arange(block_size + 1)
        yield _split_windows(ids[index])
    if targets > full * block_size:
        yield _split_windows(ids[None, full * block_size :])


def _split_windows(windows: np.ndarray) -> tuple[Tensor, Tensor]:
    """``(x, y)`` from ``(batch, block + 1)`` windows, as separate int64 tensors (so that
    masking targets in place cannot touch the inputs)."""
    windows = torch.from_numpy(windows.astype(np.int64))
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()
