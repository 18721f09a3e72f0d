"""A training run stopped half-way, its latest checkpoint damaged (its state of values of
the wrong type, its files swapped, its weights reshaped or retyped) or its pointer
(``trainer_state.json``) rewritten, then resumed by ``scratchformer train --resume``: the
run goes on (from an earlier checkpoint, with a warning naming the file), or the command
refuses in one line that names the run, and never leaves it unreadable."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from faults.harness import RECIPE, SETTINGS, STOPPED_AT, train_until_stopped
from fuzz.strategies import assert_sound_or_refused, cli, damaged_tensors, examples, mutated
from helpers import set_options
from scratchformer.run import load_run

LATEST = f"checkpoints/step-{STOPPED_AT:08d}"
PICKLED = ["optimizer.pt", "scheduler.pt", "rng.pt"]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("stopped") / "run"
    train_until_stopped(run_dir)
    return run_dir


@st.composite
def damage(draw: st.DrawFn, run_dir: Path) -> None:
    """One damage to ``run_dir``'s latest checkpoint or its pointer."""
    latest = run_dir / LATEST
    kind = draw(st.sampled_from(["state", "pointer", "swap", "weights"]))
    if kind in ("state", "pointer"):
        path = latest / "state.json" if kind == "state" else run_dir / "trainer_state.json"
        document = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(draw(mutated(document, depth=3))), encoding="utf-8")
    elif kind == "swap":
        first, second = draw(st.permutations([*PICKLED, "model.safetensors"]))[:2]
        (latest / first).rename(latest / "swapping")
        (latest / second).rename(latest / first)
        (latest / "swapping").rename(latest / second)
    else:
        tensors = load_file(latest / "model.safetensors")
        damaged = draw(damaged_tensors(tensors))
        save_file(
            {name: tensor.contiguous() for name, tensor in damaged.items()},
            latest / "model.safetensors",
        )


@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_damaged_checkpoint_is_resumed_or_refused_in_one_line(stopped, data) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = shutil.copytree(stopped, Path(scratch) / "run")
        data.draw(damage(run_dir))
        args = ["train", str(RECIPE), "--out", str(run_dir), "--resume", *set_options(SETTINGS)]
        status, _, err = cli(*args)
        assert_sound_or_refused(status, err, str(run_dir))
        load_run(run_dir)  # readable whatever happened
