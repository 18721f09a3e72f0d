"""ExportedLM: a decoding step compiled ahead of time (AOTInductor) computes what the eager
model computes, writes the cache as the eager step does, and refuses what it cannot do."""

from __future__ import annotations

import pytest
import torch

from helpers import COMPILED, PROMPTS, tiny_lm
from scratchformer.data.batching import pad_batch
from scratchformer.device import bf16_autocast
from scratchformer.inference import DecoderCache, generate
from scratchformer.inference.exported import ExportedLM, kept_package, package_key

CONTEXT = 30
"""The exported step's cache capacity: the longest prompt (6) and up to 23 new tokens."""


@pytest.fixture(scope="module")
def exported() -> tuple[torch.nn.Module, ExportedLM]:
    """A tiny LM with rotary positions (seed 0) and its step for ``PROMPTS``' rows, shared:
    compiling is most of a test's time."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = tiny_lm("rotary", **COMPILED)
    return model, ExportedLM(model, rows=len(PROMPTS), context=CONTEXT)


def steps(model: torch.nn.Module, cache_of: torch.nn.Module, count: int) -> tuple:
    """The logits of the left-padded ``PROMPTS`` and of ``count`` greedy steps after them,
    as ``stream`` feeds a model, and the cache's keys of the first layer at the end."""
    ids, mask = pad_batch(PROMPTS, 0, left=True)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    cache = DecoderCache(cache_of.decoder, len(PROMPTS), CONTEXT)
    found = []
    with torch.no_grad():
        found.append(model(ids, mask, cache=cache, positions=positions).logits[:, -1])
        positions = positions[:, -1:]
        for _ in range(count):
            token = found[-1].argmax(-1, keepdim=True)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            positions = positions + 1
            found.append(model(token, mask, cache=cache, positions=positions).logits[:, -1])
    return torch.stack(found, 1), cache.self_attn[0].keys[:, :, : cache.length], cache.length


def test_the_steps_give_the_eager_logits_and_cache(exported) -> None:
    model, lm = exported
    logits, keys, length = steps(lm, model, 12)
    expected_logits, expected_keys, expected_length = steps(model, model, 12)
    assert length == expected_length == 6 + 12
    torch.testing.assert_close(logits, expected_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(keys, expected_keys, rtol=1e-5, atol=1e-5)


def test_generation_gives_the_eager_tokens_greedy_and_sampled(exported) -> None:
    model, lm = exported
    for options in ({"greedy": True}, {"temperature": 1.0, "top_k": 20, "seed": 3}):
        found = generate(lm, PROMPTS, max_new_tokens=23, **options)
        assert found == generate(model, PROMPTS, max_new_tokens=23, **options)


def test_other_shapes_run_eagerly_and_limits_are_errors(exported) -> None:
    model, lm = exported
    two = PROMPTS[:2]  # fewer rows than the step's: every step eager, the same tokens
    assert generate(lm, two, max_new_tokens=5, greedy=True) == generate(
        model, two, max_new_tokens=5, greedy=True
    )
    with pytest.raises(
        ValueError, match="a row of 30 positions needs a cache of 31; the model's holds 30"
    ):
        generate(lm, PROMPTS, max_new_tokens=24, greedy=True)
    with (
        pytest.raises(ValueError, match=r"compiled for torch\.float32"),
        bf16_autocast(torch.device("cpu"), True),
    ):
        generate(lm, PROMPTS, max_new_tokens=2, greedy=True)
    with pytest.raises(ValueError, match=r"context=3 must be in 4\.\.33"):
        ExportedLM(model, rows=1, context=3)


def test_the_compiled_step_is_kept_for_the_next_process(exported, kept_steps, monkeypatch) -> None:
    """The package is kept under a hash of the graph and weights: the same model loads it
    (AOTInductor not called), other weights would not, and a damaged package is compiled
    again."""
    model, lm = exported
    assert lm.compilation.cached == 0
    compiles = []
    compile_ = torch._inductor.aoti_compile_and_package

    def counted(*args: object, **kwargs: object) -> object:
        compiles.append(args)
        return compile_(*args, **kwargs)

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", counted)
    again = ExportedLM(model, rows=len(PROMPTS), context=CONTEXT)
    assert again.compilation.cached == 1 and compiles == []
    assert generate(again, PROMPTS, max_new_tokens=5, greedy=True) == generate(
        model, PROMPTS, max_new_tokens=5, greedy=True
    )
    settings = lm.settings
    program = lm.exported(torch.device("cpu"))
    kept = kept_steps / f"{package_key(program, settings)}.pt2"
    assert kept.is_file()
    weight = model.decoder.layers[0].feed_forward.w1.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight[0, 0] += 1.0
        changed = package_key(lm.exported(torch.device("cpu")), settings)
        weight.copy_(saved)
    assert f"{changed}.pt2" != kept.name
    assert package_key(program, {**settings, "bf16": True}) != changed
    damaged = kept_steps / "damaged.pt2"
    damaged.write_bytes(kept.read_bytes()[:1000])
    assert kept_package(damaged) is None and kept_package(kept_steps / "none.pt2") is None
