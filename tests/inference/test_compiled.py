"""CompiledLM: decoding through torch.compile (frozen, autotuned weights) computes what the
eager model computes."""

from __future__ import annotations

import pytest
import torch
from torch._inductor.exc import InvalidCxxCompiler

from helpers import COMPILED, PROMPTS, tiny_lm
from scratchformer.data.batching import pad_batch
from scratchformer.inference import CompiledLM, DecoderCache, generate


def prompt_and_step_logits(model: torch.nn.Module, cache_of: torch.nn.Module) -> torch.Tensor:
    """The logits of the left-padded ``PROMPTS`` and of one step after them, as ``stream``
    feeds a model; ``cache_of`` is the eager model the cache is built for."""
    ids, mask = pad_batch(PROMPTS, 0, left=True)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    cache = DecoderCache(cache_of.decoder, len(PROMPTS), ids.shape[1] + 1)
    with torch.no_grad():
        prompt = model(ids, mask, cache=cache, positions=positions).logits
        token = prompt[:, -1:].argmax(-1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        step = model(token, mask, cache=cache, positions=positions[:, -1:] + 1).logits
    return torch.cat([prompt, step], dim=1)


POSITIONS = ("sinusoidal", "rotary")
"""The positions of the compiled LMs (learned ones are compiled in ``test_quantize.py``)."""


@pytest.fixture(scope="module")
def compiled_lms() -> dict[str, tuple[torch.nn.Module, CompiledLM]]:
    """A tiny LM of each kind of ``POSITIONS`` (made from seed 0) and its ``CompiledLM``,
    shared by this file's tests: compiling the graphs is most of a test's time."""
    models = {}
    for positional in POSITIONS:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            models[positional] = tiny_lm(positional, **COMPILED)
    return {name: (model, CompiledLM(model)) for name, model in models.items()}


@pytest.mark.parametrize("positional", POSITIONS)
def test_compiled_decoding_gives_the_eager_logits_and_tokens(positional: str, compiled_lms) -> None:
    """Greedy tokens of a short and a long run, the long one 6 + 40 positions from a model
    of ``max_len`` 32 (nothing limits sinusoidal or rotary positions) and through the
    short one's graphs, not compiling again for its larger cache; then the logits of a
    prompt and a step. The compiled runs go first: a table grown on demand by an eager run
    would hide a limit."""
    model, compiled = compiled_lms[positional]
    short = generate(compiled, PROMPTS, max_new_tokens=7, greedy=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        long = generate(compiled, PROMPTS, max_new_tokens=40, greedy=True)
    assert [short, long] == [
        generate(model, PROMPTS, max_new_tokens=n, greedy=True) for n in (7, 40)
    ]
    torch.testing.assert_close(
        prompt_and_step_logits(compiled, model),
        prompt_and_step_logits(model, model),
        rtol=1e-5,
        atol=1e-5,
    )


def test_two_compiled_models_of_one_shape_each_decode_as_themselves(compiled_lms) -> None:
    """Their weights are frozen into their own graphs: the second must not reuse the first's
    (the first is this file's shared model, whose graphs the first test to decode compiles)."""
    first, first_compiled = compiled_lms["sinusoidal"]
    torch.manual_seed(1)
    second = tiny_lm("sinusoidal", **COMPILED)
    expected = [generate(m, PROMPTS, max_new_tokens=8, greedy=True) for m in (first, second)]
    assert expected[0] != expected[1]
    compiled = [first_compiled, CompiledLM(second)]
    assert [generate(c, PROMPTS, max_new_tokens=8, greedy=True) for c in compiled] == expected


def test_compiled_lm_is_for_inference_only() -> None:
    model = tiny_lm()
    with pytest.raises(ValueError, match="training mode"):
        CompiledLM(model.train())
    compiled = CompiledLM(model.eval())
    assert not compiled.training and compiled.config is model.config
    with pytest.raises(RuntimeError, match="no_grad"):
        compiled(torch.tensor([PROMPTS[0]]))
    model.train()  # no guard watches the mode: the call itself must refuse
    with torch.no_grad(), pytest.raises(RuntimeError, match="training mode after compiling"):
        compiled(torch.tensor([PROMPTS[0]]))


def test_a_missing_cpp_compiler_is_a_clear_error(monkeypatch) -> None:
    def no_compiler() -> str:
        raise InvalidCxxCompiler

    monkeypatch.setattr("scratchformer.inference.compiled.get_cpp_compiler", no_compiler)
    with pytest.raises(ValueError, match="needs a C\\+\\+ compiler"):
        CompiledLM(tiny_lm())


def test_a_method_the_model_lacks_is_an_attribute_error() -> None:
    compiled = CompiledLM(tiny_lm())
    with torch.no_grad(), pytest.raises(AttributeError, match="DecoderModel has no method"):
        compiled.encode(torch.tensor([PROMPTS[0]]))
