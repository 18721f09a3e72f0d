"""Decoder-only generation from Python: the decoding engine (:mod:`.engine`) with a batch
of prompts as its requests, stepped until every one ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch import nn

from .engine import Engine, Request
from .sampling import Sampling


def stream(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    no_repeat_ngram_size: int = 0,
    greedy: bool = False,
    eos_id: int | None = None,
    stop: Callable[[list[int]], bool] | None = None,
    seed: int | None = None,
    compiled: bool = False,
    use_cache: bool = True,
) -> Iterator[list[int | None]]:
    """Generate from a decoder-only ``model`` (in eval mode) after each of the ``prompts``
    (lists of token ids); yield per step one entry a prompt: its new token, or None once
    the row is finished.

    A row finishes at ``eos_id`` (which is not yielded) or after a token for which
    ``stop(new_ids_so_far)`` is true (that token is yielded); the stream ends when every
    row has, or after ``max_new_tokens`` steps. ``greedy=True`` or ``temperature=0`` takes
    the argmax; otherwise row ``i`` draws from a ``torch.Generator`` seeded with ``seed +
    i`` (same seed, same samples, as the server's choices; None: fresh random seeds).
    Repetition penalty and n-gram ban apply to greedy decoding too. With learned
    positions, the longest prompt plus ``max_new_tokens`` must fit in
    ``model.config.max_len``, else ValueError (prompts are never silently cut).
    ``compiled``: the steps compiled (:class:`~.engine.Engine`); ``model`` may also be a
    :class:`~.compiled.CompiledModel` or an :class:`~.exported.ExportedLM` itself.
    ``use_cache=False`` recomputes the whole sequence every step (for tests and
    benchmarks). Each row computes what it would compute alone.
    """
    choose = Sampling(temperature, top_k, top_p, repetition_penalty, no_repeat_ngram_size, greedy)
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 0")
    if not prompts or not all(prompts):
        raise ValueError("every prompt needs at least one token (e.g. a BOS token)")
    if max_new_tokens == 0:
        return
    longest = max(len(prompt) for prompt in prompts)
    engine = Engine(model, len(prompts), longest + max_new_tokens, compiled, use_cache)
    requests = [
        Request(
            list(prompt),
            max_new_tokens,
            choose,
            seed=None if seed is None else seed + row,
            eos_id=eos_id,
            stop=stop,
        )
        for row, prompt in enumerate(prompts)
    ]
    for request in requests:
        engine.add(request)
    given = 0
    while not engine.idle:
        engine.step()
        # (rows not yet finished hold as many tokens: the first step may give two)
        while any(len(request.tokens) > given for request in requests):
            yield [r.tokens[given] if len(r.tokens) > given else None for r in requests]
            given += 1


def generate(model: nn.Module, prompts: Sequence[Sequence[int]], **options: Any) -> list[list[int]]:
    """For each prompt, its new token ids (without the prompt, without the eos token and
    without anything after eos or a stop): :func:`stream`, with the same options, run to
    the end."""
    outputs: list[list[int]] = [[] for _ in prompts]
    for step in stream(model, prompts, **options):
        for output, token in zip(outputs, step, strict=True):
            if token is not None:
                output.append(token)
    return outputs
