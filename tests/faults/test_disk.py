"""A full disk: a write fails with ENOSPC at a random moment of training (writes are
made durable by fsync, which is where a full disk shows, and where this one is simulated);
training stops with the error, leaves no temp file, and goes on from where it was once
there is room."""

from __future__ import annotations

import errno
import random
from pathlib import Path
from typing import Any

import pytest

import scratchformer.io
from faults.harness import INJECTED, SURVIVED, assert_recovered, go_on_here, leftovers, train_here


def fsyncs_failing_at(monkeypatch: pytest.MonkeyPatch, full_at: int | None) -> list[int]:
    """Count every fsync of the library in the list returned; number ``full_at`` fails."""
    calls = [0]
    real = scratchformer.io.fsync

    def fsync(path: Path) -> None:
        calls[0] += 1
        if calls[0] == full_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path)

    monkeypatch.setattr(scratchformer.io, "fsync", fsync)
    return calls


def test_a_full_disk_at_random_moments(tmp_path: Path, monkeypatch, reference) -> None:
    with monkeypatch.context() as patch:
        calls = fsyncs_failing_at(patch, None)
        train_here(tmp_path / "counted")
    moments = sorted(random.Random(2).sample(range(1, calls[0] + 1), 3))
    for full_at in moments:
        run_dir = tmp_path / f"full-at-{full_at}"
        with monkeypatch.context() as patch:
            fsyncs_failing_at(patch, full_at)
            with pytest.raises(OSError, match="No space left on device"):
                train_here(run_dir)
        INJECTED["full disk (fsync fails)"] += 1
        assert leftovers(run_dir) == []
        go_on_here(run_dir)
        assert_recovered(run_dir, reference.outcome())
        SURVIVED["full disk (fsync fails)"] += 1


class HalfWritten:
    """A file that fills the disk half-way through the validation record of step 5."""

    def __init__(self, path: Path, mode: str, **options: Any) -> None:
        self.file = open(path, mode, **options)  # noqa: SIM115 - closed by __exit__

    def __enter__(self) -> HalfWritten:
        return self

    def __exit__(self, *_: object) -> None:
        self.file.close()

    def write(self, text: str) -> int:
        if text.startswith('{"step": 5, "split": "val"'):
            self.file.write(text[: len(text) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.file.write(text)


def test_a_full_disk_tears_the_last_line_of_the_log(tmp_path: Path, monkeypatch, reference) -> None:
    run_dir = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(scratchformer.io, "open", HalfWritten, raising=False)
        with pytest.raises(OSError, match="No space left on device"):
            train_here(run_dir)
    INJECTED["full disk (metrics.jsonl line torn)"] += 1
    with pytest.warns(UserWarning, match="metrics.jsonl: dropped a torn last line"):
        go_on_here(run_dir)
    assert_recovered(run_dir, reference.outcome())
    SURVIVED["full disk (metrics.jsonl line torn)"] += 1
