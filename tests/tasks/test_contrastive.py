"""Contrastive sentence pretraining (SimCSE): the loss over a batch's two dropout views,
the sentences a corpus gives, evaluation, and a fine-tune from such a run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import PARAGRAPHS
from helpers import RECIPES, tiny_config
from scratchformer import build_model
from scratchformer.config import Recipe
from scratchformer.run import load_run
from scratchformer.tasks import ContrastiveTask
from scratchformer.tasks.base import Batch
from scratchformer.tasks.contrastive import TEMPERATURE


@pytest.fixture
def task(tmp_path: Path) -> ContrastiveTask:
    text = tmp_path / "text.txt"
    text.write_text(PARAGRAPHS, encoding="utf-8")
    settings = ["train.init_from=null", "data.pretraining.corpus=[]", f"data.train='{text}'"]
    return ContrastiveTask(Recipe.load(RECIPES / "pretrain-sentences.toml", settings))


def batch_of(rows: list[list[int]]) -> Batch:
    length = max(map(len, rows))
    ids = torch.tensor([row + [0] * (length - len(row)) for row in rows])
    mask = torch.tensor([[1] * len(row) + [0] * (length - len(row)) for row in rows])
    return Batch({"input_ids": ids, "attention_mask": mask}, torch.arange(len(rows)), 0)


ROWS = [[2, 7, 8, 9, 3], [2, 10, 3], [2, 11, 12, 13, 14, 3], [2, 7, 15, 3]]


def test_the_loss_is_infonce_between_two_dropout_views_of_the_batch(task) -> None:
    model = build_model(tiny_config(arch="encoder", head="similarity", dropout=0.3))
    batch = batch_of(ROWS)
    torch.manual_seed(1)
    loss = task.loss(model, batch)
    torch.manual_seed(1)  # the same dropout draw, by hand: both views in one pass
    ids, mask = batch.inputs["input_ids"], batch.inputs["attention_mask"]
    hidden, _ = model.encode(torch.cat([ids, ids]), torch.cat([mask, mask]))
    vectors = torch.stack(
        [hidden[i, : len(ROWS[i % 4])].mean(0) for i in range(8)]  # real tokens only
    )
    first, second = F.normalize(vectors, dim=-1).chunk(2)
    cosines = torch.stack([torch.stack([first[i] @ second[j] for j in range(4)]) for i in range(4)])
    expected = -(cosines / TEMPERATURE).log_softmax(-1).diagonal().mean()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    assert loss > 0.0
    model.eval()  # no dropout: each view is its twin, a cosine of 1
    torch.testing.assert_close(
        task.logits(model, batch).diagonal(), torch.full((4,), 1 / TEMPERATURE)
    )


def test_a_slice_of_a_batch_finds_its_positives_within_itself(task) -> None:
    """Processes and accumulated micro-batches each take a slice: its rows' twins are
    within it, as for a batch of those rows alone."""
    model = build_model(tiny_config(arch="encoder", head="similarity")).eval()
    batch = batch_of(ROWS)
    torch.testing.assert_close(
        task.loss(model, batch.slice(1, 2)), task.loss(model, batch_of(ROWS[2:]))
    )


def test_the_corpus_is_read_as_its_sentences_each_once(task) -> None:
    assert task.read("train") == [
        "The cat sat on the mat.",
        "A dog ran under the old tree.",
        "The red bird sang.",
        "My friend read a long book by the fire.",
        "A small boat crossed the cold river.",
    ]


def test_a_run_evaluates_alike_every_time_and_a_fine_tune_starts_from_it(
    contrastive_run: Path, mlm_run: Path
) -> None:
    task, model = load_run(contrastive_run)
    first, again = task.evaluate(model), task.evaluate(model)
    assert first == again and set(first) == {"loss", "accuracy"}
    assert not model.training, "evaluation leaves the model as it found it"
    assert Recipe.load(contrastive_run / "config.json").model.head == "similarity"
    _, start = load_run(mlm_run)
    tuned = dict(model.named_parameters())
    assert set(tuned) == {k for k, _ in start.named_parameters() if not k.startswith("head.")}
