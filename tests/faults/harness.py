"""What the fault-injection tests share: the tiny run they break, run as the command line
or in this process; the checks that a broken run recovered as if nothing had happened; and
the count of faults injected and survived (each test reports its own; tests/conftest.py
prints the tally)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from helpers import RECIPES, TINY_MODEL, set_options
from scratchformer.config import Recipe
from scratchformer.run import train
from scratchformer.training.rundir import has_checkpoint
from scratchformer.training.trainer import Trainer

RECIPE = RECIPES / "copy.toml"
MAX_STEPS = 30
STOPPED_AT = MAX_STEPS // 2
SETTINGS = [
    *TINY_MODEL,
    "model.dropout=0.1",  # so that a resume must restore the random state
    "data.synthetic.train_size=200",
    "data.synthetic.val_size=20",
    "train.batch_size=8",
    "train.warmup_steps=5",
    f"train.max_steps={MAX_STEPS}",
    "train.eval_every=1",  # a checkpoint after every step: kills land in their writes
    "train.eval_batches=1",
    "train.log_every=1",
    "train.threads=1",
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

INJECTED: Counter[str] = Counter()
SURVIVED: Counter[str] = Counter()


class Training:
    """``scratchformer train`` of the suite's run in a process of its own."""

    def __init__(self, run_dir: Path, *flags: str, cwd: Path) -> None:
        command = [sys.executable, "-m", "scratchformer", "train", str(RECIPE)]
        command += ["--out", str(run_dir), *flags, *set_options(SETTINGS)]
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []

    def wait_for_a_step(self) -> None:
        """Until training has logged an evaluation (on stderr); raises if it ended before."""
        while line := self.process.stderr.readline():  # type: ignore[union-attr]
            self.lines.append(line)
            if line.startswith("step "):
                return
        raise AssertionError(f"training ended before its first step:\n{''.join(self.lines)}")

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        """Its exit status (``-N`` when signal N killed it) and all it wrote on stderr."""
        rest = self.process.communicate(timeout=timeout)[1]
        return self.process.returncode, "".join(self.lines) + rest


def flags_to_go_on(run_dir: Path) -> list[str]:
    """What ``train`` needs to go on in ``run_dir``: resume its checkpoint, or start again
    (``--overwrite``) when it was stopped before its first one."""
    if has_checkpoint(run_dir):
        return ["--resume"]
    return ["--overwrite"] if run_dir.exists() else []


def train_here(run_dir: Path, **options: Any) -> None:
    """The suite's run in this process (``run.train``'s ``options``: resume, overwrite)."""
    train(Recipe.load(RECIPE, SETTINGS), run_dir, quiet=True, **options)


def train_until_stopped(run_dir: Path) -> None:
    """The suite's run, stopped (as by Ctrl-C) just after its checkpoint of step
    :data:`STOPPED_AT`."""
    with pytest.MonkeyPatch.context() as patch:
        train_step = Trainer._train_step

        def stop_half_way(self: Trainer, network: Any) -> Any:
            if self.state["step"] == STOPPED_AT:
                raise KeyboardInterrupt
            return train_step(self, network)

        patch.setattr(Trainer, "_train_step", stop_half_way)
        with pytest.raises(KeyboardInterrupt):
            train_here(run_dir)


def go_on_here(run_dir: Path) -> None:
    train_here(run_dir, resume=has_checkpoint(run_dir), overwrite=not has_checkpoint(run_dir))


def outcome(run_dir: Path) -> dict[str, Any]:
    """What a finished run is judged by: the last checkpoint's weights, the best weights,
    and the log of losses and metrics (not timings)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    final = run_dir / "checkpoints" / f"step-{MAX_STEPS:08d}" / "model.safetensors"
    return {
        "weights": load_file(final),
        "best": load_file(run_dir / "model.safetensors"),
        "log": [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in records],
    }


def assert_recovered(run_dir: Path, reference: dict[str, Any]) -> None:
    """``run_dir`` holds what the uninterrupted run holds, and no temp or lock file."""
    got = outcome(run_dir)
    for kind in ("weights", "best"):
        assert got[kind].keys() == reference[kind].keys()
        assert all(got[kind][k].isfinite().all() for k in got[kind]), kind
        assert all(got[kind][k].equal(reference[kind][k]) for k in got[kind]), kind
    assert got["log"] == reference["log"]
    assert leftovers(run_dir) == []


def leftovers(run_dir: Path) -> list[str]:
    """Hidden entries under ``run_dir``: temp files of killed writers, the lock."""
    return sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob(".*"))
