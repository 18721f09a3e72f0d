"""The bi-encoder similarity task: pairs encoded apart, cosine predictions, CoSENT."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers import TINY_SIZES, tiny_config
from scratchformer import build_model
from scratchformer.config import Recipe
from scratchformer.models.heads import pool
from scratchformer.tasks import build_task
from scratchformer.tasks.similarity import cosent_loss


def pairs_file(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.tsv"
    path.write_text(
        "a\tb\tscore\n"
        "a man plays a guitar\ta man plays the guitar\t4.8\n"
        "a cat sleeps\tthe stock market fell\t0.2\n"
        "two dogs run\tdogs are running\t3.5\n"
    )
    return path


def similarity_task(tmp_path: Path):
    path = str(pairs_file(tmp_path))
    data = {
        "train": path,
        "val": path,
        "text_columns": ["a", "b"],
        "label_column": "score",
        "tokenizer": "wordpiece",
        "vocab_size": 60,
        "max_len": 16,
    }
    model = {**TINY_SIZES, "n_layers": 1}
    recipe = Recipe.from_dict(
        {"task": "similarity", "data": data, "model": model, "train": {"batch_size": 3}}
    )
    task = build_task(recipe)
    task.prepare()
    return task


def test_cosent_by_hand() -> None:
    """Gold 3 > 2 > 1: the pairs (0, 1), (0, 2), (1, 2) are ranked; equal gold ranks none."""
    s = torch.tensor([0.5, 0.7, 0.1])
    wrong = [20 * (0.7 - 0.5), 20 * (0.1 - 0.5), 20 * (0.1 - 0.7)]
    expected = math.log(1 + sum(math.exp(w) for w in wrong))
    torch.testing.assert_close(cosent_loss(s, torch.tensor([3.0, 2.0, 1.0])).item(), expected)
    assert cosent_loss(s, torch.tensor([1.0, 1.0, 1.0])).item() == pytest.approx(0.0)


def test_head_gives_the_cosine_of_each_sentence_alone() -> None:
    """Each sentence is encoded on its own: its padding and its partner change nothing."""
    config = tiny_config(arch="encoder", head="similarity", vocab_size=30)
    model = build_model(config).eval()
    first, second = torch.randint(1, 30, (1, 5)), torch.randint(1, 30, (1, 3))
    ids = torch.zeros(2, 5, dtype=torch.long)
    ids[0], ids[1, :3] = first, second
    mask = ids != 0
    out = model(ids, mask)
    hidden = [model.encode(s)[0] for s in (first, second)]
    vectors = [pool(h, None) for h in hidden]
    assert out.logits.shape == (1, 1) and out.last_hidden_state.shape == (2, 5, config.d_model)
    torch.testing.assert_close(out.logits[:, 0], F.cosine_similarity(*vectors), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="an even number of rows, not 1"):
        model(first)


def test_task_batches_pairs_and_learns_their_order(tmp_path: Path) -> None:
    task = similarity_task(tmp_path)
    config = task.model_config()
    assert (config.head, config.type_vocab_size) == ("similarity", 0)
    batch = task.global_batch(0, 1)
    ids = batch.inputs["input_ids"]
    assert ids.shape[:2] == (3, 2) and ids[:, :, 0].eq(task.tokenizer().cls_id).all()
    torch.manual_seed(0)
    model = build_model(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(30):
        optimizer.zero_grad()
        loss = task.loss(model, batch)
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.1, "three pairs are not put in order"
    metrics = task.evaluate(model)
    assert metrics["spearman"] == pytest.approx(1.0)
    predicted = [
        r.value for r in task.predict(model.eval(), ["a cat sleeps\tthe stock market fell"])
    ]
    assert len(predicted) == 1 and -1 <= predicted[0] <= 1
    vectors = task.embed(model, ["a cat sleeps", "the stock market fell"], batch_size=1)
    assert vectors.shape == (2, config.d_model)
    torch.testing.assert_close(vectors.norm(dim=-1), torch.ones(2))
    assert (vectors[0] @ vectors[1]).item() == pytest.approx(predicted[0], abs=1e-5)


def test_single_sentences_are_refused(tmp_path: Path) -> None:
    data = {"train": str(pairs_file(tmp_path)), "text_columns": ["a"], "label_column": "score"}
    with pytest.raises(ValueError, match="compares sentence pairs"):
        build_task(Recipe.from_dict({"task": "similarity", "data": data}))
