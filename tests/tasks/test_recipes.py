"""Every recipe, on the real data: the task prepares its tokenizer and labels, the model it
asks for trains, and the loss on a fixed batch goes down."""

from __future__ import annotations

from pathlib import Path

import pytest

from scratchformer.config import TASKS, Recipe
from scratchformer.data.instructions import chat_set, write_chat_set
from scratchformer.nn import Dropout, MultiHeadAttention
from scratchformer.run import start_run, train
from scratchformer.tasks import TASKS as TASK_CLASSES
from scratchformer.training.trainer import build_optimizer

RECIPE_DIR = Path(__file__).resolve().parents[2] / "recipes"
RECIPES = sorted(RECIPE_DIR.glob("*.toml"))
SMALL = ["train.batch_size=4", "train.max_tokens=none", "train.weight_decay=0"]
NO_DROPOUT = ["model.dropout=0", "model.attention_dropout=0", "train.lora_dropout=0"]
"""Dropout off: a clean descent on one batch."""
ONE_STEP = ["train.max_steps=1", "train.eval_batches=1", "train.max_minutes=none"]
SHORT_WINDOWS = ["data.max_len=128", "data.qa.doc_stride=64"]
"""Question answering reads windows of 128 tokens here, not 256: a quarter of the attention
and half of the rest, for a descent of the same kind."""
SMALL_CORPUS = ["data.pretraining.corpus=['stsb']"]
"""A pretraining recipe's text in these tests: one small corpus (the model is the recipe's;
every named corpus is read in ``tests/data/test_corpus.py``)."""
CHAT_DATA = "runs/chat-data"
"""Where the chat recipes read the files of ``scratchformer make-chat-data``; here a small
set of the same kind is made instead, of SST-2's requests only (short and quick to make)."""


def test_there_is_a_recipe_per_task_kind() -> None:
    tasks = {Recipe.load(path).task for path in RECIPES}
    assert tasks == set(TASKS)


@pytest.fixture(scope="module")
def pretraining_runs(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> PretrainingRuns:
    """The pretraining runs that recipes start from, each trained once in a worker."""
    return PretrainingRuns(tmp_path_factory.mktemp("runs"))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_trains_on_a_fixed_batch(
    path: Path, pretraining_runs: PretrainingRuns, tmp_path: Path
) -> None:
    given = Recipe.load(path)
    start = pretraining_runs.start_of(given)
    # encoders fine-tune at a fine-tuning rate (also from a pretraining run of one step); a
    # translator from a barely trained span-corruption run learns at a from-scratch rate
    full_fine_tune = given.train.init_from is not None and given.train.lora_rank is None
    encoder = TASK_CLASSES[given.task].arch == "encoder"
    lr = f"train.lr={1e-4 if full_fine_tune and encoder else 1e-3}"
    corpus = SMALL_CORPUS if given.data.pretraining.corpus else []
    windows = SHORT_WINDOWS if given.task == "qa" else []
    chat = pretraining_runs.chat_data_of(given)
    recipe = Recipe.load(path, [*SMALL, *NO_DROPOUT, lr, *start, *corpus, *windows, *chat])
    task, model = start_run(recipe, tmp_path)
    task.prepare_model(model)  # as the trainer does: DPO's reference is the starting model
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


class PretrainingRuns:
    """For a recipe that starts from the run of another (``train.init_from =
    "runs/<recipe>"``), that recipe's run, one step long, trained the first time it is asked
    for, from its own pretraining run if it has one: the encoder fine-tunes start from one
    pretrain-encoder run, ``stsb-sentences`` from a pretrain-sentences run that starts
    from it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def start_of(self, recipe: Recipe) -> list[str]:
        """The setting that points ``recipe`` to its pretraining run (none if it has none)."""
        init_from = recipe.train.init_from
        if init_from is None or Path(init_from).parent != Path("runs"):
            return []
        run_dir = self.directory / Path(init_from).name
        if not run_dir.exists():
            source = RECIPE_DIR / f"{run_dir.name}.toml"
            recipe = Recipe.load(source)
            overrides = [*ONE_STEP, *self.start_of(recipe), *self.chat_data_of(recipe)]
            corpus = SMALL_CORPUS if recipe.data.pretraining.corpus else []
            train(source, run_dir, overrides=[*overrides, *corpus], quiet=True)
        return [f"train.init_from='{run_dir}'"]

    def chat_data_of(self, recipe: Recipe) -> list[str]:
        """The settings that point a chat recipe's files to a small chat set of the same
        kind, made the first time it is asked for (none for other recipes)."""
        files = {"train": recipe.data.train, "val": recipe.data.val}
        if not any(isinstance(f, str) and f.startswith(CHAT_DATA) for f in files.values()):
            return []
        chat_dir = self.directory / "chat-data"
        if not chat_dir.exists():
            write_chat_set(chat_dir, chat_set(8, 4, sources=["sst2"]))  # short chats
        return [
            f"data.{split}='{chat_dir / Path(file).name}'"
            for split, file in files.items()
            if isinstance(file, str)
        ]
