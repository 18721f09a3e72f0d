"""Replaced-token detection (ELECTRA) pretraining: its batches and evaluation. Resuming
and fine-tuning from its runs are tested with masked LM's (``tests/tasks/test_mlm.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from scratchformer.nn.loss import IGNORE_INDEX
from scratchformer.run import load_run


def test_a_batch_carries_a_draw_a_token_and_evaluation_repeats_itself(rtd_run: Path) -> None:
    task, model = load_run(rtd_run)
    batch = task.global_batch(0, 1)
    ids, draws = batch.inputs["input_ids"], batch.inputs["replacement_draws"]
    assert draws.shape == ids.shape and ((draws >= 0) & (draws < 1)).all()
    assert torch.equal(task.global_batch(0, 1).inputs["replacement_draws"], draws)
    assert (batch.targets != IGNORE_INDEX).any()
    first, again = task.evaluate(model), task.evaluate(model)
    assert first == again
    assert first["loss"] == pytest.approx(
        first["generator_loss"] + 50.0 * first["detection_loss"], rel=1e-6
    )
    assert 0.0 < first["replaced"] < 0.15
    shares = ("accuracy", "detection_accuracy", "detection_precision", "detection_recall")
    assert all(0.0 <= first[name] <= 1.0 for name in shares)
