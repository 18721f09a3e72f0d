"""Continuous batching: requests that join a running batch at any step and leave when done
get the tokens they would get alone, whatever else shares the batch."""

from __future__ import annotations

import random

import pytest
import torch

from helpers import COMPILED, LATENT, TINY_VOCAB, tiny_lm
from scratchformer.inference import Engine, Request, Sampling, generate
from scratchformer.inference.exported import ExportedLM

PROMPTS = [[5, 9, 2], [7], [3, 1, 4, 1, 5, 9, 2, 6], [8, 8], [1, 2, 3, 4], [6]]
LENGTHS = [7, 3, 5, 9, 2, 6]
"""New tokens asked of each prompt: rows leave the batch at different steps."""


def run(engine: Engine, joins: dict[int, list[Request]]) -> int:
    """Step ``engine`` until idle, adding ``joins[step]`` before each step; the steps."""
    steps = 0
    while steps <= max(joins) or not engine.idle:
        for request in joins.get(steps, []):
            engine.add(request)
        engine.step()
        steps += 1
    return steps


@pytest.mark.parametrize(
    ("positional", "fields"),
    [("learned", {}), ("rotary", {}), ("alibi", {}), ("rotary", LATENT)],
    ids=["learned", "rotary", "alibi", "latent"],  # latent: caches of a latent and a key
)
def test_requests_joining_and_leaving_get_their_tokens_alone(positional: str, fields) -> None:
    torch.manual_seed(0)
    model = tiny_lm(positional, **fields)
    alone = [
        generate(model, [prompt], max_new_tokens=n, greedy=True)[0]
        for prompt, n in zip(PROMPTS, LENGTHS, strict=True)
    ]
    requests = [Request(p, n) for p, n in zip(PROMPTS, LENGTHS, strict=True)]
    # three rows for six requests: later ones wait for a free row; a long prompt joins
    # after short ones (the rows move right), and the cache of 16 positions fills up
    # (the columns no row uses are cut)
    engine = Engine(model, max_batch=3, max_len=16)
    run(engine, {0: requests[:2], 2: requests[2:4], 3: requests[4:]})
    assert [r.tokens for r in requests] == alone
    assert [r.finish_reason for r in requests] == ["length"] * len(requests)
    assert engine.length <= 16


def test_a_row_is_reused_and_the_batch_never_exceeds_its_rows() -> None:
    model = tiny_lm("rotary")
    engine = Engine(model, max_batch=2, max_len=12)
    requests = [Request([1 + i], 4) for i in range(5)]
    for request in requests:
        engine.add(request)
    most = 0
    while not engine.idle:
        engine.step()
        most = max(most, len(engine.live))
    assert most == 2
    assert all(len(r.tokens) == 4 for r in requests)


def test_eos_and_stop_end_a_request_and_cancelling_frees_its_row() -> None:
    model = tiny_lm("rotary")
    free_run = generate(model, [[3, 4]], max_new_tokens=6, greedy=True)[0]
    at_eos = Request([3, 4], 6, eos_id=free_run[2])
    stopped = Request([3, 4], 6, stop=lambda tokens: len(tokens) == 2)
    cancelled = Request([3, 4], 6)
    engine = Engine(model, max_batch=3, max_len=12)
    for request in (at_eos, stopped, cancelled):
        engine.add(request)
    engine.step()
    cancelled.cancelled = True
    run(engine, {0: []})
    assert (at_eos.tokens, at_eos.finish_reason) == (free_run[:2], "stop")
    assert (stopped.tokens, stopped.finish_reason) == (free_run[:2], "stop")
    assert cancelled.finish_reason is None and len(cancelled.tokens) == 2
    assert engine.live == []


def test_seeded_sampling_repeats_whatever_else_is_in_the_batch() -> None:
    model = tiny_lm("rotary", peaked_by=1.0)
    sampling = Sampling(temperature=1.0, top_p=0.9)
    alone = Request([5, 9], 8, sampling, seed=7)
    run(Engine(model, 1, 16), {0: [alone]})
    crowded = Request([5, 9], 8, sampling, seed=7)
    others = [Request([i + 1] * (i + 1), 6, sampling) for i in range(3)]
    run(Engine(model, 4, 16), {0: others, 1: [crowded]})
    assert crowded.tokens == alone.tokens
    assert all(0 <= t < TINY_VOCAB for t in crowded.tokens)


@pytest.mark.parametrize("use_cache", [True, False])
def test_logprobs_are_the_models_log_softmax_whatever_shares_the_batch(use_cache: bool) -> None:
    """Each new token's and each prompt token's log-probability, with the likeliest three
    at its place, against the model's log-softmax over the whole sequence; a request of no
    new tokens scores its prompt without taking a row."""
    model = tiny_lm("rotary", peaked_by=1.0)
    sampling = Sampling(temperature=1.0)
    requests = [
        Request(p, n, sampling, seed=i, logprobs=3, score_prompt=True)
        for i, (p, n) in enumerate(zip(PROMPTS[:4], [5, 0, 3, 6], strict=True))
    ]
    engine = Engine(model, max_batch=2, max_len=16, use_cache=use_cache)
    run(engine, {0: requests[:2], 1: requests[2:]})
    for request in requests:
        ids = request.prompt + request.tokens
        with torch.no_grad():
            reference = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
        scored = request.prompt_logprobs + request.token_logprobs
        assert [s.token for s in scored] == ids[1:]
        found = torch.tensor([s.logprob for s in scored])
        assert torch.allclose(
            found, reference.gather(-1, torch.tensor(ids[1:])[:, None])[:, 0], atol=1e-5
        )
        best = reference.topk(3)
        assert [[t for t, _ in s.top] for s in scored] == best.indices.tolist()
        assert torch.allclose(
            torch.tensor([[v for _, v in s.top] for s in scored]).reshape(-1, 3),
            best.values,
            atol=1e-5,
        )
    assert requests[1].tokens == [] and requests[1].finish_reason == "length"


def test_a_request_longer_than_a_row_is_refused() -> None:
    engine = Engine(tiny_lm("rotary"), max_batch=2, max_len=8)
    with pytest.raises(ValueError, match=r"prompt \(3 tokens\) \+ max_new_tokens=6 exceeds"):
        engine.add(Request([1, 2, 3], 6))


def test_random_arrivals_in_a_small_cache_get_their_tokens_alone() -> None:
    """Prompts of every length join at random steps while the cache of 12 positions fills
    and is cut again: a prompt longer than what the live rows keep after a cut moves them
    right again."""
    model = tiny_lm("rotary")
    draw = random.Random(3)
    prompts = [
        [draw.randrange(1, TINY_VOCAB) for _ in range(draw.randint(1, 9))] for _ in range(14)
    ]
    lengths = [draw.randint(1, 12 - len(prompt)) for prompt in prompts]
    requests = [Request(p, n) for p, n in zip(prompts, lengths, strict=True)]
    joins: dict[int, list[Request]] = {}
    for request in requests:
        joins.setdefault(draw.randrange(20), []).append(request)
    run(Engine(model, max_batch=3, max_len=12), joins)
    alone = [
        generate(model, [p], max_new_tokens=n, greedy=True)[0]
        for p, n in zip(prompts, lengths, strict=True)
    ]
    assert [r.tokens for r in requests] == alone


def test_a_prompt_longer_than_the_live_rows_after_a_cut_moves_them_right() -> None:
    # a row of 8 positions: A's and B's tokens fill it at step 6, so C's prompt of 6 tokens,
    # joining at step 7, finds the columns cut to B's 5, fewer than its prompt
    model = tiny_lm("rotary")
    a, b, c = Request([1], 7), Request([2], 7), Request([3, 4, 5, 6, 7, 8], 2)
    engine = Engine(model, max_batch=2, max_len=8)
    run(engine, {0: [a], 3: [b], 7: [c]})
    alone = [
        generate(model, [r.prompt], max_new_tokens=n, greedy=True)[0]
        for r, n in ((a, 7), (b, 7), (c, 2))
    ]
    assert [a.tokens, b.tokens, c.tokens] == alone


def test_compiled_steps_give_the_eager_tokens() -> None:
    """The steps compiled ahead of time (on the CPU): a workload of joins, leaves and cuts
    (rows feed at every length up to the full cache, 2 or 3 rows a step) runs through the
    compiled step, and every request gets the tokens it gets alone, eagerly: the greedy
    ones from the step's own argmax (fed back as the next step's tokens while every row
    takes its own), beside a greedy one that asks for log-probabilities and a sampled one,
    which choose from the logits."""
    model = tiny_lm("rotary", **COMPILED)
    sampled = Sampling(temperature=1.0, top_k=5)
    kinds = [{}, {"sampling": sampled, "seed": 3}, {}, {}, {"logprobs": 2}, {}]

    def requests() -> list[Request]:
        return [Request(p, n, **k) for p, n, k in zip(PROMPTS, LENGTHS, kinds, strict=True)]

    alone = []
    for request in requests():
        run(Engine(model, max_batch=1, max_len=16), {0: [request]})
        alone.append(request.tokens)
    engine = Engine(model, max_batch=3, max_len=16, compiled=True)
    assert isinstance(engine.stepper, ExportedLM)
    compiled_step, rows, outputs, fed = engine.stepper.step, [], [], []

    def counted(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        rows.append(len(inputs[0]))
        fed.append(bool(outputs) and inputs[0] is outputs[-1][2])
        outputs.append(compiled_step(inputs))
        return outputs[-1]

    engine.stepper.step = counted
    batched = requests()
    steps = run(engine, {0: batched[:2], 2: batched[2:4], 3: batched[4:]})
    assert [r.tokens for r in batched] == alone
    assert set(rows) == {2, 3} and len(rows) >= steps - 2
    assert any(fed) and not all(fed)


def test_a_request_whose_constraints_leave_no_token_stops_with_a_warning() -> None:
    model = tiny_lm("rotary")
    request = Request([1], 31, Sampling(no_repeat_ngram_size=1), seed=0)
    engine = Engine(model, max_batch=2, max_len=32)
    engine.add(request)
    with pytest.warns(UserWarning, match="left no token to choose"):
        while not engine.idle:
            engine.step()
    assert request.finish_reason == "stop" and len(request.tokens) == TINY_VOCAB - 1
    assert sorted(request.tokens) == [t for t in range(TINY_VOCAB) if t != 1]
