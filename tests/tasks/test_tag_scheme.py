"""IOB2 decoding: the allowed transitions by hand, Viterbi against brute force over every
sequence, and the tagging task's predictions with and without the scheme."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from scratchformer.config import Recipe
from scratchformer.nn.loss import IGNORE_INDEX
from scratchformer.tasks import build_task
from scratchformer.tasks.tag_scheme import best_valid_tags, iob2_transitions, may_follow

LABELS = ("B-LOC", "B-PER", "I-LOC", "I-PER", "O")


def test_inside_tags_only_continue_their_own_entity() -> None:
    allowed = iob2_transitions(LABELS)
    expected = [
        # B-LOC B-PER I-LOC I-PER O   may follow:
        [1, 1, 1, 0, 1],  # B-LOC
        [1, 1, 0, 1, 1],  # B-PER
        [1, 1, 1, 0, 1],  # I-LOC
        [1, 1, 0, 1, 1],  # I-PER
        [1, 1, 0, 0, 1],  # O
        [1, 1, 0, 0, 1],  # the sentence start
    ]
    assert allowed.tolist() == [[bool(x) for x in row] for row in expected]
    assert may_follow("NN", "VB") and not may_follow("O", "I-MISC")


def brute_force(log_probs: torch.Tensor, allowed: torch.Tensor) -> float:
    """The best total log-probability over every allowed sequence, by enumeration."""
    words, tags = log_probs.shape
    best = -float("inf")
    for path in itertools.product(range(tags), repeat=words):
        steps = zip((-1, *path), path, strict=False)
        if all(allowed[previous, tag] for previous, tag in steps):
            best = max(best, sum(float(log_probs[i, tag]) for i, tag in enumerate(path)))
    return best


def test_viterbi_finds_the_best_allowed_sequence_of_every_sentence_of_a_batch() -> None:
    allowed = iob2_transitions(LABELS)
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([4, 1, 3, 0, 2] * 8)  # padded to 4 words
    log_probs = (3 * torch.randn(len(lengths), 4, len(LABELS), generator=generator)).log_softmax(-1)
    paths = best_valid_tags(log_probs, lengths, allowed)
    for sentence, path, length in zip(log_probs, paths, lengths.tolist(), strict=True):
        assert len(path) == length
        assert all(allowed[p, t] for p, t in zip((-1, *path), path, strict=False))
        total = sum(float(sentence[i, t]) for i, t in enumerate(path))
        assert total == pytest.approx(brute_force(sentence[:length], allowed), abs=1e-5)


def test_a_valid_argmax_is_kept_and_an_orphan_inside_tag_opens_its_entity() -> None:
    allowed = iob2_transitions(LABELS)
    valid = torch.tensor([[0.0, 5, 0, 0, 0], [0, 0, 0, 5, 0], [0, 0, 0, 0, 5]])
    orphan = torch.tensor([[0.0, 0, 0, 0, 5], [0, 3, 0, 4, 0], [9, 9, 9, 9, 9]])
    batch = torch.stack([valid, orphan]).log_softmax(-1)
    assert best_valid_tags(batch, torch.tensor([3, 2]), allowed) == [
        [1, 3, 4],  # B-PER I-PER O
        [4, 1],  # O I-PER becomes O B-PER
    ]
    assert best_valid_tags(torch.zeros(2, 0, len(LABELS)), torch.tensor([0, 0]), allowed) == [
        [],
        [],
    ]


@pytest.mark.parametrize(
    ("scheme", "expected"), [("iob2", ["O", "B-PER"]), ("none", ["O", "I-PER"])]
)
def test_the_tagging_task_decodes_by_its_scheme(
    tmp_path: Path, scheme: str, expected: list[str]
) -> None:
    train = tmp_path / "train.txt"
    train.write_text("Peter B-PER\nParker I-PER\nwent O\n\nParis B-LOC\nLille I-LOC\n")
    data = {"train": str(train), "tokenizer": "char", "tagging": {"tag_scheme": scheme}}
    task = build_task(Recipe.from_dict({"task": "tagging", "data": data}))
    task.prepare()
    assert tuple(task.labels()) == LABELS
    logits = torch.tensor([[[0.0, 0, 0, 0, 5], [9, 9, 9, 9, 9], [0, 3, 0, 4, 0]]])
    targets = torch.tensor([[4, IGNORE_INDEX, 3]])  # two words, the first's second piece ignored
    assert task.word_tags(logits, targets) == [expected]
