"""Preference training's pieces: the frozen reference (under LoRA the policy with its
adapters off, equal to the base model, no copy of the weights; else a frozen copy; no
gradient from it) and the loss of a batch of pairs, which slicing keeps whole."""

from __future__ import annotations

import torch

from helpers import decoder
from scratchformer.config import TrainConfig
from scratchformer.nn.loss import IGNORE_INDEX
from scratchformer.nn.preference import dpo_loss, sequence_logprobs
from scratchformer.tasks.base import Batch
from scratchformer.tasks.preference import preference_loss, reference_for
from scratchformer.training.lora import apply_lora

IDS = torch.tensor([[3, 7, 9, 4, 11, 2], [5, 6, 8, 12, 0, 0]])
INPUTS = {"input_ids": IDS, "attention_mask": IDS != 0}
N = IGNORE_INDEX
TARGETS = torch.tensor([[N, N, 4, 11, 2, N], [N, 12, N, N, N, N]])
"""Two rows, their response tokens the only targets that count (shifted by one)."""


def policy(lora: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    model = decoder(dropout=0.3)  # dropout: the reference scores in eval mode
    if lora:
        apply_lora(model, TrainConfig(lora_rank=2, lora_targets=["qkv_proj", "w1"]))
    return model.train()


def trained(model: torch.nn.Module) -> None:
    """A step of training, as far as the reference can tell: what trains moves."""
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(torch.randn_like(parameter), alpha=0.2)


def logprobs(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return sequence_logprobs(model.eval()(**INPUTS).logits, TARGETS)


def test_under_lora_the_reference_is_the_policy_with_its_adapters_off() -> None:
    expected = logprobs(policy(lora=False))  # the same weights, never adapted
    model = policy(lora=True)
    reference = reference_for(model)
    assert reference.shared and reference.model is model  # no second copy of the weights
    trained(model)
    model.train()
    assert torch.equal(reference.logprobs(INPUTS, TARGETS), expected)
    assert model.training  # put back as it was
    assert not torch.allclose(logprobs(model), expected)  # the adapters are back on


def test_without_lora_the_reference_is_a_frozen_copy_of_the_start() -> None:
    model = policy(lora=False)
    expected = logprobs(model)
    reference = reference_for(model.train())
    trained(model)
    assert not reference.shared and reference.model is not model
    assert not reference.model.training
    assert not any(p.requires_grad for p in reference.model.parameters())
    assert torch.equal(reference.logprobs(INPUTS, TARGETS), expected)
    assert not torch.allclose(logprobs(model), expected)


def test_adapters_that_already_change_the_model_or_other_trained_weights_are_copied() -> None:
    moved = policy(lora=True)
    trained(moved)  # a LoRA run resumed: its adapters are not the start's any more
    assert not reference_for(moved).shared
    head_too = policy(lora=True)
    head_too.lm_head.requires_grad_(True)  # (tied to the embedding: both train)
    assert not reference_for(head_too).shared


def test_no_gradient_reaches_the_reference() -> None:
    for lora in (True, False):
        model = policy(lora)
        reference = reference_for(model)
        trained(model)
        model.zero_grad()
        scores = sequence_logprobs(model(**INPUTS).logits, TARGETS)
        against = reference.logprobs(INPUTS, TARGETS)
        assert not against.requires_grad
        dpo_loss(scores[:1], scores[1:], against[:1], against[1:], beta=0.1).loss.backward()
        trained_grads = [p.grad for p in model.parameters() if p.requires_grad]
        assert trained_grads and all(g is not None for g in trained_grads)
        assert all(p.grad is None for p in model.parameters() if not p.requires_grad)
        if not reference.shared:
            assert all(p.grad is None for p in reference.model.parameters())


def test_a_batch_of_pairs_scores_each_pair_s_two_rows_and_slices_pair_by_pair() -> None:
    """Four pairs ``(pairs, 2, seq)``: the loss is :func:`dpo_loss` of each row's
    log-probabilities, the chosen row first; halves of the batch hold whole pairs, so the
    mean of their losses is the batch's."""
    model = policy(lora=True)
    reference = reference_for(model)
    trained(model)
    model.eval()
    ids = torch.cat([IDS, IDS.flip(0), IDS.roll(1, -1), IDS]).view(4, 2, -1)
    targets = torch.cat([TARGETS, TARGETS.flip(0), TARGETS, TARGETS.flip(0)]).view(4, 2, -1)
    batch = Batch({"input_ids": ids, "attention_mask": ids != 0}, targets, int((ids != 0).sum()))
    found = preference_loss(model, reference, batch, beta=0.5)
    rows = {"input_ids": ids.flatten(0, 1), "attention_mask": ids.flatten(0, 1) != 0}
    with torch.no_grad():
        scores = sequence_logprobs(model(**rows).logits, targets.flatten(0, 1))
    against = reference.logprobs(rows, targets.flatten(0, 1))
    expected = dpo_loss(scores[0::2], scores[1::2], against[0::2], against[1::2], beta=0.5)
    assert torch.allclose(found.losses, expected.losses)
    assert torch.allclose(found.chosen_rewards, expected.chosen_rewards)
    halves = [preference_loss(model, reference, batch.slice(i, 2), 0.5).loss for i in (0, 1)]
    assert torch.allclose((halves[0] + halves[1]) / 2, found.loss)
