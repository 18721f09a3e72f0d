"""Each file of the latest checkpoint, and the pointer to it, cut short in turn, as a disk
that lied about a write would leave it: the resume warns naming the file, goes on from the
checkpoint before (or, for the pointer, the newest checkpoint), and ends as the
uninterrupted run. With every checkpoint damaged it refuses, naming the files, and changes
nothing. (A torn line of metrics.jsonl is test_disk's.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from faults.harness import (
    INJECTED,
    STOPPED_AT,
    SURVIVED,
    assert_recovered,
    train_here,
    train_until_stopped,
)
from helpers import snapshot

LATEST = f"checkpoints/step-{STOPPED_AT:08d}"
DAMAGED = [
    *(
        f"{LATEST}/{name}"
        for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt", "state.json")
    ),
    "trainer_state.json",
]


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run stopped half-way, just after its checkpoint of step ``STOPPED_AT``."""
    run_dir = tmp_path_factory.mktemp("stopped") / "run"
    train_until_stopped(run_dir)
    return run_dir


@pytest.mark.parametrize("damaged", DAMAGED)
def test_a_damaged_file_is_named_and_survived(
    tmp_path: Path, stopped: Path, reference, damaged: str
) -> None:
    run_dir = shutil.copytree(stopped, tmp_path / "run")
    cut_short(run_dir / damaged)
    kind = f"cut short: {Path(damaged).name}"
    INJECTED[kind] += 1
    with pytest.warns(UserWarning, match=str(run_dir / damaged)):
        train_here(run_dir, resume=True)
    assert_recovered(run_dir, reference.outcome())
    SURVIVED[kind] += 1


def test_with_every_checkpoint_damaged_resume_refuses(tmp_path: Path, stopped: Path) -> None:
    run_dir = shutil.copytree(stopped, tmp_path / "run")
    steps = (STOPPED_AT, STOPPED_AT - 1)
    weights = [run_dir / f"checkpoints/step-{step:08d}/model.safetensors" for step in steps]
    for path in weights:
        cut_short(path)
    INJECTED["cut short: every checkpoint (refused)"] += 1
    before = snapshot(tmp_path)
    with pytest.raises(
        ValueError, match=f"no checkpoint of {run_dir} loads: {weights[0]} .*; {weights[1]} "
    ):
        train_here(run_dir, resume=True)
    assert snapshot(tmp_path) == before
    SURVIVED["cut short: every checkpoint (refused)"] += 1
