"""Every recipe, on the real data: the task prepares its tokenizer and labels, the model it
asks for trains, and the loss on a fixed batch goes down."""

from __future__ import annotations

from pathlib import Path

import pytest

from scratchformer.config import TASKS, Recipe
from scratchformer.nn import Dropout, MultiHeadAttention
from scratchformer.run import start_run
from scratchformer.training.trainer import build_optimizer

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.toml"))
SMALL = ["train.batch_size=8", "train.max_tokens=none", "train.weight_decay=0"]
NO_DROPOUT = ["model.dropout=0", "model.attention_dropout=0", "train.lora_dropout=0"]
"""Dropout off: a clean descent on one batch."""


def test_there_is_a_recipe_per_task_kind() -> None:
    tasks = {Recipe.load(path).task for path in RECIPES}
    assert tasks == set(TASKS)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_trains_on_a_fixed_batch(path: Path, data_dir: Path, tmp_path: Path) -> None:
    given = Recipe.load(path)
    full_fine_tune = given.model.init_from is not None and given.train.lora_rank is None
    lr = f"train.lr={1e-4 if full_fine_tune else 1e-3}"
    recipe = Recipe.load(path, [*SMALL, *NO_DROPOUT, lr])
    task, model = start_run(recipe, tmp_path)
    model.train()
    rates = [m.p for m in model.modules() if isinstance(m, Dropout)]
    rates += [m.dropout for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert rates and not any(rates)
    optimizer = build_optimizer(model, recipe.train)
    batch = task.global_batch(0, 1)
    losses = []
    for _ in range(12):
        loss = task.loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses  # deep models start slowly at a flat lr
    metrics = task.evaluate(model, "val", max_batches=2)
    assert task.metric in metrics
