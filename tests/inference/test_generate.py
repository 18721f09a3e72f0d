"""Decoder-only generation: the logits processors, and greedy / sampled generation with and
without the cache, batched and alone."""

from __future__ import annotations

import math

import pytest
import torch

from helpers import LATENT, PROMPTS, TINY_VOCAB, tiny_lm
from scratchformer.inference import (
    ban_repeated_ngrams,
    filter_top_k,
    filter_top_p,
    generate,
    penalize_repetition,
    scale_temperature,
    stream,
)

INF = float("inf")


# --- logits processors -------------------------------------------------------------------


def test_temperature_divides_the_logits() -> None:
    logits = torch.tensor([[1.0, -2.0, 3.0], [0.5, 0.0, float("-inf")]])
    scaled = scale_temperature(logits, 0.5)
    torch.testing.assert_close(scaled.softmax(-1), (logits * 2).softmax(-1))
    torch.testing.assert_close(scaled, (logits - logits.amax(-1, keepdim=True)) * 2)


def test_a_tiny_temperature_samples_the_most_likely_token_not_nan() -> None:
    logits = torch.tensor([[10.0, 30.0, -5.0]])
    probs = scale_temperature(logits, 1e-300).softmax(-1)
    assert torch.equal(probs, torch.tensor([[0.0, 1.0, 0.0]]))


def test_top_k_keeps_the_k_largest() -> None:
    logits = torch.tensor([[1.0, 4.0, 3.0, -2.0], [0.0, -1.0, 5.0, 2.0]])
    expected = torch.tensor([[-INF, 4.0, 3.0, -INF], [-INF, -INF, 5.0, 2.0]])
    assert torch.equal(filter_top_k(logits, 2), expected)
    assert torch.equal(filter_top_k(logits, 10), logits)


@pytest.mark.parametrize(
    ("p", "kept"), [(5e-324, 1), (0.3, 1), (0.45, 1), (0.6, 2), (0.8, 3), (0.95, 4)]
)
def test_top_p_keeps_the_smallest_set_reaching_p(p: float, kept: int) -> None:
    logits = torch.tensor([[0.1, 0.5, 0.15, 0.25]]).log()  # by rank: 0.5, 0.25, 0.15, 0.1
    order = [1, 3, 2, 0]
    out = filter_top_p(logits, p)
    assert torch.isfinite(out[0, order[:kept]]).all()
    assert torch.isinf(out[0, order[kept:]]).all()
    torch.testing.assert_close(out[0, order[:kept]], logits[0, order[:kept]])


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0], [2.0, -1.0, 0.5, 3.0]])
    ids = torch.tensor([[3, 0, 1, 1], [3, 0, 0, 2]])
    mask = torch.tensor([[True] * 4, [False, False, True, True]])  # row 1: left padding
    out = penalize_repetition(logits, ids, 2.0, mask)
    assert out.tolist() == [[1.0, -2.0, 0.5, 1.5], [1.0, -1.0, 0.25, 3.0]]


def test_no_repeat_ngram_bans_tokens_completing_a_seen_ngram() -> None:
    logits = torch.zeros(2, 6)
    ids = torch.tensor([[1, 2, 3, 1, 2, 5, 1, 2], [0, 0, 4, 5, 4, 1, 4, 5]])
    banned_bigram = ban_repeated_ngrams(logits, ids, 3)  # "1 2" was followed by 3 and 5
    assert torch.isinf(banned_bigram[0]).tolist() == [False, False, False, True, False, True]
    assert torch.isinf(banned_bigram[1]).tolist() == [False, False, False, False, True, False]
    unigram = ban_repeated_ngrams(logits, ids, 1)  # every token seen is banned
    assert torch.isinf(unigram[0]).tolist() == [False, True, True, True, False, True]


def test_no_repeat_ngram_ignores_padding() -> None:
    ids = torch.tensor([[0, 3, 0]])  # "0 3" would be banned, but its 0 is padding
    mask = torch.tensor([[False, True, True]])
    assert not torch.isinf(ban_repeated_ngrams(torch.zeros(1, 4), ids, 2, mask)).any()
    assert torch.isinf(ban_repeated_ngrams(torch.zeros(1, 4), ids, 2))[0, 3]


# --- generation --------------------------------------------------------------------------


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rotary", "alibi"])
@pytest.mark.parametrize("max_new_tokens", [1, 4, 12])
def test_cached_greedy_equals_uncached_and_batched_equals_alone(
    positional: str, max_new_tokens: int
) -> None:
    model = tiny_lm(positional)
    cached = generate(model, PROMPTS, max_new_tokens=max_new_tokens, greedy=True)
    uncached = generate(model, PROMPTS, max_new_tokens=max_new_tokens, greedy=True, use_cache=False)
    alone = [generate(model, [p], max_new_tokens=max_new_tokens, greedy=True)[0] for p in PROMPTS]
    assert cached == uncached == alone
    assert all(len(out) == max_new_tokens for out in cached)


def test_greedy_continues_the_argmax_of_full_forward_passes() -> None:
    model = tiny_lm()
    ids = list(PROMPTS[2])
    for _ in range(5):
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert generate(model, [PROMPTS[2]], max_new_tokens=5, temperature=0) == [ids[6:]]


@pytest.mark.parametrize("q_lora_rank", [None, 8])
def test_latent_attention_generates_the_argmax_of_full_forward_passes(q_lora_rank) -> None:
    """Multi-head latent attention with rotary positions: greedy generation from its cache
    of latents, the prompts left-padded in one batch, gives each prompt the tokens of full
    forward passes without a cache."""
    model = tiny_lm("rotary", **LATENT, q_lora_rank=q_lora_rank)
    found = generate(model, PROMPTS, max_new_tokens=6, greedy=True)
    for prompt, new in zip(PROMPTS, found, strict=True):
        ids = list(prompt)
        for _ in range(6):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        assert new == ids[len(prompt) :]


def test_top_k_1_sampling_equals_greedy() -> None:
    model = tiny_lm(peaked_by=1.0)
    greedy = generate(model, PROMPTS, max_new_tokens=8, greedy=True)
    assert generate(model, PROMPTS, max_new_tokens=8, top_k=1, seed=3) == greedy


def test_same_seed_same_samples_different_seed_different_samples() -> None:
    model = tiny_lm(peaked_by=0.5)  # flat distributions: samples vary
    torch.manual_seed(0)
    first = generate(model, PROMPTS, max_new_tokens=10, seed=1)
    torch.manual_seed(1)  # the global RNG plays no part
    assert generate(model, PROMPTS, max_new_tokens=10, seed=1) == first
    assert generate(model, PROMPTS, max_new_tokens=10, seed=2) != first


def test_penalties_take_effect_in_generation() -> None:
    model = tiny_lm()
    out = generate(model, PROMPTS, max_new_tokens=10, greedy=True, no_repeat_ngram_size=1)
    for prompt, new in zip(PROMPTS, out, strict=True):
        assert len(set(prompt + new)) == len(set(prompt)) + len(new)  # nothing repeated


@pytest.mark.parametrize("greedy", [True, False])
def test_constraints_that_leave_no_token_end_the_text_with_a_warning(greedy: bool) -> None:
    """Every token of the vocabulary banned (no repeated unigram, longer than the
    vocabulary): each row ends once its choices run out, all of them distinct, no NaN."""
    model = tiny_lm("rotary")
    with pytest.warns(UserWarning, match="left no token to choose: the text ends there"):
        out = generate(model, PROMPTS, max_new_tokens=31, greedy=greedy, no_repeat_ngram_size=1)
    for prompt, new in zip(PROMPTS, out, strict=True):
        assert not set(new) & set(prompt) and len(set(new)) == len(new)
        assert len(set(prompt)) + len(new) == TINY_VOCAB


def test_eos_ends_a_row_and_is_left_out() -> None:
    model = tiny_lm(peaked_by=0.5)
    free = generate(model, [PROMPTS[0]], max_new_tokens=12, seed=5)[0]
    eos = free[4]
    out = generate(model, [PROMPTS[0]], max_new_tokens=12, seed=5, eos_id=eos)[0]
    assert out == free[: free.index(eos)]


def test_stop_callable_ends_a_row_with_the_stopping_token_kept() -> None:
    model = tiny_lm()
    free = generate(model, PROMPTS, max_new_tokens=6, greedy=True)
    steps = list(
        stream(model, PROMPTS, max_new_tokens=6, greedy=True, stop=lambda new: len(new) == 2)
    )
    assert len(steps) == 2  # every row done: the stream ends early
    assert [[step[row] for step in steps] for row in range(len(PROMPTS))] == [
        out[:2] for out in free
    ]


def test_finished_rows_yield_none_while_others_go_on() -> None:
    model = tiny_lm()
    free = generate(model, PROMPTS, max_new_tokens=6, greedy=True)
    eos = free[0][2]  # row 0 stops at its third token at the latest
    end = free[0].index(eos)
    steps = list(stream(model, PROMPTS, max_new_tokens=6, greedy=True, eos_id=eos))
    row = [step[0] for step in steps]
    assert row[:end] == free[0][:end] and all(token is None for token in row[end:])
    out = generate(model, PROMPTS, max_new_tokens=6, greedy=True, eos_id=eos)
    assert out == [new[: new.index(eos)] if eos in new else new for new in free]
    assert len(steps) == 6 and any(eos not in new for new in free)  # some row goes on


def test_too_long_for_learned_positions_is_a_clear_error() -> None:
    model = tiny_lm("learned")
    with pytest.raises(
        ValueError, match=r"a row of 33 positions .* exceeds the model's max_len=32"
    ):
        generate(model, PROMPTS, max_new_tokens=27)
    assert len(generate(model, PROMPTS, max_new_tokens=26, greedy=True)[2]) == 26


def test_bad_arguments_are_clear_errors() -> None:
    model = tiny_lm()
    with pytest.raises(ValueError, match=r"top_p=1\.5"):
        generate(model, PROMPTS, max_new_tokens=2, top_p=1.5)
    with pytest.raises(ValueError, match="at least one token"):
        generate(model, [[1], []], max_new_tokens=2)
    with pytest.raises(ValueError, match=r"model\.eval\(\)"):
        generate(model.train(), PROMPTS, max_new_tokens=2)


def test_sampling_follows_the_model_distribution() -> None:
    """One-step samples from a flat model: their frequencies match its softmax."""
    model = tiny_lm(peaked_by=0.3)
    prompt = [[4, 2]]
    probs = model(torch.tensor(prompt)).logits[0, -1].softmax(-1)
    draws = generate(model, prompt * 2000, max_new_tokens=1, seed=0, use_cache=False)
    counts = torch.bincount(torch.tensor(draws).flatten(), minlength=TINY_VOCAB).float()
    assert (counts / 2000 - probs).abs().max() < 4 * math.sqrt(0.25 / 2000)
