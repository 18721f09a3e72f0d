"""The prefix cache: prompts that begin alike compute only the rest, and get the tokens and
log-probabilities they would get without it."""

from __future__ import annotations

import random

import pytest
import torch

from helpers import LATENT, TINY_VOCAB, peaked
from scratchformer.inference import Engine, Request
from scratchformer.inference.prefix_cache import BLOCK, PrefixCache

draw = random.Random(0)
SHARED = [draw.randrange(1, TINY_VOCAB) for _ in range(2 * BLOCK + 5)]
PROMPTS = [SHARED + [draw.randrange(1, TINY_VOCAB) for _ in range(n)] for n in (1, 4, 9, 0)]


def lm(positional: str, **fields) -> torch.nn.Module:
    return peaked(4.0, arch="decoder", positional=positional, max_len=96, **fields)


def fed_lengths(model: torch.nn.Module) -> list[int]:
    """The number of tokens of every call of ``model`` from now on, as the list grows."""
    lengths: list[int] = []
    model.register_forward_pre_hook(lambda _, args: lengths.append(args[0].shape[1]))
    return lengths


def decode(model: torch.nn.Module, prefixes: PrefixCache | None) -> list[Request]:
    """Each prompt decoded in turn, 6 tokens, greedy, with log-probabilities."""
    engine = Engine(model, max_batch=2, max_len=64, prefixes=prefixes)
    requests = [Request(p, 6, logprobs=2) for p in PROMPTS]
    for request in requests:
        engine.add(request)
        while not engine.idle:
            engine.step()
    return requests


@pytest.mark.parametrize(
    ("positional", "fields"),
    [("learned", {}), ("rotary", {}), ("alibi", {}), ("rotary", LATENT)],
    ids=["learned", "rotary", "alibi", "latent"],
)
def test_a_reused_prefix_gives_what_the_whole_prompt_gives(positional: str, fields) -> None:
    torch.manual_seed(0)
    model = lm(positional, **fields)
    plain = decode(model, None)
    lengths = fed_lengths(model)
    cached = decode(model, PrefixCache(1024))
    assert [r.tokens for r in cached] == [r.tokens for r in plain]
    for with_cache, without in zip(cached, plain, strict=True):
        found = torch.tensor([s.logprob for s in with_cache.token_logprobs])
        expected = torch.tensor([s.logprob for s in without.token_logprobs])
        assert torch.allclose(found, expected, atol=1e-5)
    prefills = [n for n in lengths if n > 1]
    # the first prompt whole; the others from their second block on (each leaves a token)
    assert prefills == [
        len(PROMPTS[0]),
        len(PROMPTS[1]) - 2 * BLOCK,
        len(PROMPTS[2]) - 2 * BLOCK,
        5,
    ]


def test_choices_of_one_prompt_run_it_once() -> None:
    model = lm("rotary")
    lengths = fed_lengths(model)
    engine = Engine(model, max_batch=4, max_len=64)
    choices = [Request(PROMPTS[1], 3, seed=i) for i in range(3)]
    for request in choices:
        engine.add(request)
    while not engine.idle:
        engine.step()
    assert [n for n in lengths if n > 1] == [len(PROMPTS[1])]
    alone = Request(PROMPTS[1], 3)
    engine.add(alone)
    while not engine.idle:
        engine.step()
    assert all(r.tokens == alone.tokens for r in choices)


def test_the_least_recently_used_blocks_go_beyond_the_limit() -> None:
    model = lm("rotary")
    prefixes = PrefixCache(3 * BLOCK)
    engine = Engine(model, max_batch=1, max_len=80, prefixes=prefixes)
    first = [1] * (2 * BLOCK + 1)
    second = [2] * (2 * BLOCK + 1)
    for prompt in (first, second, first):
        engine.add(Request(prompt, 1))
        engine.step()
        assert prefixes.tokens <= 3 * BLOCK
    lengths = fed_lengths(model)
    engine.add(Request(second, 1))  # its first block went when the first prompt came back
    engine.step()
    assert lengths == [len(second)]
    with pytest.raises(ValueError, match="holds no block"):
        PrefixCache(BLOCK - 1)


def test_a_scored_prompt_is_computed_whole() -> None:
    model = lm("rotary")
    prefixes = PrefixCache(1024)
    engine = Engine(model, max_batch=1, max_len=64, prefixes=prefixes)
    engine.add(Request(PROMPTS[0], 1))
    engine.step()
    scored = Request(PROMPTS[0], 1, logprobs=0, score_prompt=True)
    engine.add(scored)
    engine.step()
    assert len(scored.prompt_logprobs) == len(PROMPTS[0]) - 1
