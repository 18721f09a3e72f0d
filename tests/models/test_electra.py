"""ELECTRA's replaced-token detection head: the generator's samples, what is replaced, and
the objective against the losses computed by hand."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import tiny_config
from scratchformer import build_model
from scratchformer.config import ReplacedTokenOptions
from scratchformer.models.electra import sample
from scratchformer.models.heads import Masked
from scratchformer.nn.loss import IGNORE_INDEX


def test_a_draw_picks_the_token_whose_share_of_the_cumulative_probability_holds_it() -> None:
    logits = torch.tensor([0.1, 0.2, 0.7]).log().expand(6, 3)
    draws = torch.tensor([0.0, 0.05, 0.15, 0.29, 0.31, 0.999])
    assert sample(logits, draws).tolist() == [0, 0, 1, 1, 2, 2]


def test_samples_follow_the_generators_distribution() -> None:
    logits = torch.randn(1, 7).expand(60_000, 7)
    drawn = sample(logits, torch.rand(60_000, generator=torch.Generator().manual_seed(0)))
    frequencies = torch.bincount(drawn, minlength=7) / 60_000
    torch.testing.assert_close(frequencies, logits[0].softmax(-1), atol=0.01, rtol=0)


def masked_batch(seed: int = 0) -> Masked:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 29, (3, 10), generator=generator)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, [2, 7]] = ids[:, [2, 7]]
    inputs = ids.clone()
    inputs[:, [2, 7]] = 4  # [MASK]
    draws = torch.rand(ids.shape, generator=generator)
    return Masked(inputs, labels, replacement_draws=draws)


def test_the_objective_is_the_generators_loss_plus_the_weighted_detection_loss() -> None:
    torch.manual_seed(0)
    model = build_model(
        tiny_config(arch="encoder", head="rtd", rtd=ReplacedTokenOptions(generator_layers=1))
    ).eval()
    head = model.head
    assert head.generator_head.weight is model.embedding.tokens.weight
    assert len(head.generator.layers) == 1 and len(model.encoder.layers) == 2
    masked = masked_batch()
    chosen = masked.labels != IGNORE_INDEX
    detection = head.detect(model, masked)
    # the generator, by hand: its layers over the shared embeddings, the tied head
    generated, _ = head.generator(model.embedding(masked.input_ids))
    generator_logits = head.generator_head(generated)[chosen]
    torch.testing.assert_close(detection.generator_logits, generator_logits)
    samples = sample(generator_logits, masked.replacement_draws[chosen])
    corrupted = masked.labels.where(chosen, masked.input_ids)
    corrupted[chosen] = samples
    original = masked.labels.where(chosen, masked.input_ids)
    assert torch.equal(detection.replaced, corrupted != original)
    assert not detection.replaced[~chosen].any()
    replaced_logits = model(corrupted).logits
    torch.testing.assert_close(detection.replaced_logits, replaced_logits)
    expected = F.cross_entropy(generator_logits, original[chosen]) + 50.0 * (
        F.binary_cross_entropy_with_logits(replaced_logits, (corrupted != original).float())
    )
    loss = model(**vars(masked)).loss
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)


def test_padding_is_not_detected_and_the_draws_are_required() -> None:
    torch.manual_seed(0)
    model = build_model(tiny_config(arch="encoder", head="rtd")).eval()
    masked = masked_batch()
    attention_mask = torch.ones_like(masked.input_ids)
    attention_mask[0, 8:] = 0
    padded = Masked(masked.input_ids, masked.labels, attention_mask, None, masked.replacement_draws)
    detection = model.head.detect(model, padded)
    assert torch.equal(detection.counted, attention_mask.bool())
    with pytest.raises(ValueError, match="replacement_draws"):
        model(masked.input_ids, labels=masked.labels)
