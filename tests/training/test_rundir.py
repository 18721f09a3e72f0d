"""The run directory's layout: one writer (the lock, held for a whole training run), and
no other module that spells the names of its files."""

from __future__ import annotations

import ast
import itertools
import json
import os
import shutil
from pathlib import Path

import pytest

from helpers import RECIPES, TINY_MODEL, earlier_layout, snapshot
from scratchformer.config import Recipe
from scratchformer.opening import load_run
from scratchformer.run import train
from scratchformer.training import rundir
from scratchformer.training.rundir import (
    AVERAGE_FILE,
    CHECKPOINT_FILES,
    LOCK_FILE,
    is_run_file,
    locked,
)

pytest.importorskip("fcntl")

SOURCE = Path(rundir.__file__).parents[1]
OTHER_LAYOUTS = ("interop/hf.py", "interop/onnx.py")
"""The modules that name the files of other directories (a Hugging Face checkpoint, an ONNX
export), some of which a run directory's share."""

RECIPE = Recipe.load(
    RECIPES / "copy.toml",
    [
        *TINY_MODEL,
        "data.synthetic.train_size=200",
        "data.synthetic.val_size=20",
        "train.max_steps=2",
        "train.eval_every=1",
        "train.batch_size=4",
    ],
)


def test_a_second_writer_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    run_dir, empty = tmp_path / "copy", tmp_path / "empty"
    train(RECIPE, run_dir, quiet=True)
    empty.mkdir()
    before = snapshot(tmp_path)
    with locked(run_dir), locked(empty):
        assert (run_dir / ".lock").read_text() == f"{os.getpid()}\n"
        during = snapshot(tmp_path)
        # a lock held says so first, whatever else the directory holds or lacks
        for directory, resume in itertools.product((run_dir, empty), (True, False)):
            with pytest.raises(
                ValueError, match=f"^{directory} is in use by process {os.getpid()}$"
            ):
                train(RECIPE, directory, resume=resume, quiet=True)
        assert snapshot(tmp_path) == during
    assert snapshot(tmp_path) == before  # the lock file goes with the lock
    train(RECIPE, run_dir, resume=True, quiet=True)


def test_the_lock_is_released_when_training_fails(tmp_path: Path) -> None:
    broken = Recipe.from_dict(RECIPE.to_dict(), ["data.train=['missing.src', 'missing.tgt']"])
    with pytest.raises(FileNotFoundError):
        train(broken, tmp_path / "run", quiet=True)
    assert not (tmp_path / "run" / ".lock").exists()
    train(RECIPE, tmp_path / "run", quiet=True)


def test_a_lock_file_left_by_a_killed_writer_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / ".lock").write_text("999999\n")  # flock ends with its process; the file stays
    with locked(tmp_path):
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
    assert not (tmp_path / ".lock").exists()


def spelt_run_files(path: Path) -> set[str]:
    """The names of a run's files that ``path`` spells as string literals (its docstrings,
    prose, aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    names = {*CHECKPOINT_FILES, AVERAGE_FILE, LOCK_FILE}
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in prose
        and (is_run_file(node.value) or node.value in names)
    }


def test_only_the_layout_spells_the_names_of_a_runs_files() -> None:
    spelt = {
        path.relative_to(SOURCE).as_posix(): names
        for path in sorted(SOURCE.rglob("*.py"))
        if (names := spelt_run_files(path))
    }
    assert {"config.json", "chat_template.jinja", ".lock"} <= spelt.pop("training/rundir.py")
    assert {name: spelt[name] for name in spelt if name not in OTHER_LAYOUTS} == {}


def test_a_run_written_in_the_earlier_flat_layout_opens_with_one_note(
    qa_run: Path, tmp_path: Path
) -> None:
    """A run whose config.json holds every data key flat and ``model.init_from`` (as
    earlier versions wrote them) answers as the run it was."""
    old = tmp_path / "old"
    shutil.copytree(qa_run, old)
    recipe = json.loads((qa_run / rundir.CONFIG_FILE).read_text())
    (old / rundir.CONFIG_FILE).write_text(json.dumps(earlier_layout(recipe)))
    questions = ["Who won?\tThe winner is Ada. Then the rest."]
    task, model = load_run(qa_run)
    with pytest.warns(FutureWarning, match=r"config.json: keys of an earlier version, .*"):
        old_task, old_model = load_run(old)
    assert old_task.recipe == task.recipe
    assert old_task.predict_lines(old_model, questions) == task.predict_lines(model, questions)
