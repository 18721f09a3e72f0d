"""Run directories: starting one from a recipe, and opening a trained one."""

from __future__ import annotations

from pathlib import Path

from torch import nn

from .config import Recipe
from .models import build_model
from .tasks import Task, build_task
from .training.checkpoint import MODEL_FILE, atomic_write_text, load_weights

CONFIG_FILE = "config.json"


def start_run(recipe: Recipe, run_dir: Path) -> Task:
    """Learn the task's tokenizers (and labels) from the training data, complete the
    recipe's model section, and write both to ``run_dir``."""
    task = build_task(recipe)
    task.prepare()
    recipe.model = task.model_config()
    run_dir.mkdir(parents=True, exist_ok=True)
    task.save(run_dir)
    atomic_write_text(run_dir / CONFIG_FILE, recipe.to_json())
    return task


def open_task(run_dir: Path, overrides: list[str] | None = None) -> tuple[Task, Recipe]:
    """The task of a started run, with its tokenizers, and its recipe (plus overrides)."""
    recipe = Recipe.load(run_dir / CONFIG_FILE, overrides or [])
    task = build_task(recipe)
    task.load(run_dir)
    return task, recipe


def load_run(run_dir: Path) -> tuple[Task, nn.Module]:
    """The task and the best trained model (in eval mode) of a run directory."""
    if not (run_dir / MODEL_FILE).exists():
        raise FileNotFoundError(f"{run_dir} holds no trained model ({MODEL_FILE}); train it first")
    task, recipe = open_task(run_dir)
    model = build_model(recipe.model)
    load_weights(run_dir / MODEL_FILE, model)
    return task, model.eval()
