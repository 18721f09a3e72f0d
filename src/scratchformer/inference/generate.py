"""Decoder-only generation: greedy decoding and sampling, one token a step with a KV cache.

Each step turns the logits of the last position into the next token: first the penalties
that also apply to greedy decoding (repetition penalty, n-gram ban), then temperature,
top-k and top-p, then the argmax or a draw. Each logits processor is a small function on
``(batch, vocab)`` logits.

Prompts of different lengths run as one batch: left-padded, with an attention mask and
per-row positions, so that every row computes what it would compute alone.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..data.batching import pad_batch
from ..device import model_device
from .cache import SPARE, DecoderCache
from .kernels import decoding_kernels


def scale_temperature(logits: Tensor, temperature: float) -> Tensor:
    """Divide by ``temperature``: below 1 sharpens the distribution, above 1 flattens it.
    The largest logit of each row is taken off first (the softmax is the same), so that a
    temperature near 0 tends to the greedy choice instead of overflowing into NaN (one
    below the dtype's smallest normal number, which would round to 0, counts as that)."""
    temperature = max(temperature, torch.finfo(logits.dtype).tiny)
    return (logits - logits.amax(dim=-1, keepdim=True)) / temperature


def filter_top_k(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits of each row; the others become -inf."""
    values, index = logits.topk(min(k, logits.shape[-1]), dim=-1)
    return torch.full_like(logits, float("-inf")).scatter(-1, index, values)


def filter_top_p(logits: Tensor, p: float) -> Tensor:
    """Nucleus filtering: keep the smallest set of most likely tokens whose probability
    reaches ``p`` (always at least the most likely one); the others become -inf."""
    ordered, order = logits.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass of the more likely tokens
    ordered = ordered.masked_fill(before >= p, float("-inf"))
    return torch.empty_like(logits).scatter(-1, order, ordered)


def token_set(ids: Tensor, where: Tensor | None, vocab_size: int) -> Tensor:
    """``(batch, vocab)``, True at every token ``ids[b, i]`` with ``where[b, i]`` (all if
    ``where`` is None)."""
    hits = torch.zeros(ids.shape[0], vocab_size, device=ids.device)
    weights = torch.ones_like(ids, dtype=hits.dtype) if where is None else where.to(hits.dtype)
    return hits.scatter_add_(1, ids, weights) > 0


def penalize_repetition(
    logits: Tensor, ids: Tensor, penalty: float, mask: Tensor | None = None
) -> Tensor:
    """CTRL's repetition penalty: the logit of every token already in the row ``ids``
    (prompt included; ``mask`` marks real tokens) is divided by ``penalty`` if positive and
    multiplied by it if negative, so ``penalty > 1`` makes repeats less likely."""
    seen = token_set(ids, mask, logits.shape[-1])
    penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalized, logits)


def ban_repeated_ngrams(logits: Tensor, ids: Tensor, n: int, mask: Tensor | None = None) -> Tensor:
    """-inf for every token that would complete an ``n``-gram already in the row ``ids``:
    the rows' last ``n - 1`` tokens are compared with every earlier window. ``mask`` marks
    real tokens (padding on the left, so a row's last tokens are real)."""
    if ids.shape[1] < n:
        return logits
    windows = ids.unfold(1, n, 1)  # (batch, windows, n)
    suffix = ids[:, ids.shape[1] - n + 1 :]
    match = (windows[..., :-1] == suffix[:, None, :]).all(dim=-1)
    if mask is not None:
        match &= mask.unfold(1, n, 1).all(dim=-1)
    return logits.masked_fill(token_set(windows[..., -1], match, logits.shape[-1]), float("-inf"))


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen from the logits of the last position."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    greedy: bool = False

    def __post_init__(self) -> None:
        checks = {
            "temperature": self.temperature >= 0,
            "top_k": self.top_k is None or self.top_k >= 1,
            "top_p": self.top_p is None or 0 < self.top_p <= 1,
            "repetition_penalty": self.repetition_penalty > 0,
            "no_repeat_ngram_size": self.no_repeat_ngram_size >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)!r} is out of range")

    @property
    def reads_history(self) -> bool:
        """Whether the choice depends on the tokens so far (a penalty or an n-gram ban)."""
        return self.repetition_penalty != 1.0 or self.no_repeat_ngram_size > 0

    def __call__(
        self, logits: Tensor, ids: Tensor, mask: Tensor, generator: torch.Generator
    ) -> Tensor:
        """The next token of every row, ``(batch,)``, given the rows so far ``ids``; for a
        row whose constraints (an n-gram ban) leave no token, :data:`NO_TOKEN`."""
        if self.repetition_penalty != 1.0:
            logits = penalize_repetition(logits, ids, self.repetition_penalty, mask)
        left = None
        """Whether each row has a token left: only a ban can take every one."""
        if self.no_repeat_ngram_size:
            logits = ban_repeated_ngrams(logits, ids, self.no_repeat_ngram_size, mask)
            left = (logits > float("-inf")).any(dim=-1)
            logits = torch.where(left[:, None], logits, 0.0)  # (its choice is discarded)
        if self.greedy or self.temperature == 0:
            chosen = logits.argmax(dim=-1)
        else:
            logits = scale_temperature(logits, self.temperature)
            if self.top_k is not None:
                logits = filter_top_k(logits, self.top_k)
            if self.top_p is not None:
                logits = filter_top_p(logits, self.top_p)
            chosen = torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)
        return chosen if left is None else torch.where(left, chosen, NO_TOKEN)


NO_TOKEN = -1
"""What :class:`Sampling` chooses where no token is allowed: the row ends there."""
NO_TOKEN_WARNING = (
    "the decoding constraints (no_repeat_ngram_size) left no token to choose: the text ends there"
)


def ended_without_a_token() -> None:
    warnings.warn(NO_TOKEN_WARNING, stacklevel=3)


def decoding_device(model: nn.Module) -> torch.device:
    """The device of the model's weights, where decoding runs. Decoding with dropout on
    would be random and would break the cache's exactness, so training mode is an error."""
    if model.training:
        raise ValueError("the model is in training mode (dropout on); call model.eval() first")
    return model_device(model)


@torch.no_grad()
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
    pad_id: int = 0,
    stop: Callable[[list[int]], bool] | None = None,
    seed: int | None = None,
    use_cache: bool = True,
) -> Iterator[list[int | None]]:
    """Generate from a decoder-only ``model`` (in eval mode) after each of the ``prompts``
    (lists of token ids); yield per step one entry a prompt: its new token, or None once
    the row is finished.

    A row finishes at ``eos_id`` (which is not yielded) or after a token for which
    ``stop(new_ids_so_far)`` is true (that token is yielded). Finished rows are fed
    ``pad_id`` until every row is done, which ends the stream early; at most
    ``max_new_tokens`` steps run. ``greedy=True`` or ``temperature=0`` takes the argmax;
    otherwise a draw from a ``torch.Generator`` seeded with ``seed`` (same seed, same
    samples; None: a fresh random seed). Repetition penalty and n-gram ban apply to greedy
    decoding too. With learned positions, the longest prompt plus ``max_new_tokens`` must
    fit in ``model.config.max_len``, else ValueError (prompts are never silently cut).
    ``use_cache=False`` recomputes the whole sequence every step (for tests and benchmarks).
    ``model`` may be a :class:`~.compiled.CompiledModel`: the same tokens, faster steps.
    Until the stream ends (or is closed), the model's modules carry the decoding kernels
    (:func:`~.kernels.decoding_kernels`).
    """
    device = decoding_device(model)
    choose = Sampling(temperature, top_k, top_p, repetition_penalty, no_repeat_ngram_size, greedy)
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 0")
    if not prompts or not all(prompts):
        raise ValueError("every prompt needs at least one token (e.g. a BOS token)")
    ids, mask = pad_batch(prompts, pad_id, left=True)
    ids, mask = ids.to(device), mask.to(device)
    config = model.config
    if config.positional == "learned" and ids.shape[1] + max_new_tokens > config.max_len:
        raise ValueError(
            f"the longest prompt ({ids.shape[1]} tokens) + max_new_tokens={max_new_tokens} "
            f"exceeds the model's max_len={config.max_len}"
        )
    positions = (mask.cumsum(1) - 1).clamp(min=0)  # every row starts at position 0
    generator = torch.Generator(device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    cache = None
    if use_cache:
        needed = ids.shape[1] + max_new_tokens + SPARE
        capacity = getattr(model, "cache_capacity", needed)  # (an ExportedLM's is fixed)
        if needed > capacity:
            raise ValueError(
                f"the longest prompt ({ids.shape[1]} tokens) + max_new_tokens={max_new_tokens} "
                f"needs a cache of {needed} positions; the model's holds {capacity}"
            )
        cache = DecoderCache(model.decoder, len(prompts), capacity)
    new: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    fed, fed_positions = ids, positions  # the whole prompt batch first
    with decoding_kernels(model, len(prompts)):
        for _ in range(max_new_tokens):
            logits = model(fed, mask, cache=cache, positions=fed_positions).logits[:, -1].float()
            step: list[int | None] = []
            for row, token in enumerate(choose(logits, ids, mask, generator).tolist()):
                if token == NO_TOKEN and not done[row]:
                    ended_without_a_token()
                if done[row] or token in (eos_id, NO_TOKEN):
                    done[row] = True
                    step.append(None)
                    continue
                new[row].append(token)
                step.append(token)
                done[row] = stop is not None and stop(new[row])
            yield step
            if all(done):
                return
            tokens = torch.tensor([[pad_id if t is None else t] for t in step], device=device)
            ids = torch.cat([ids, tokens], dim=1)
            mask = torch.cat([mask, torch.ones_like(tokens, dtype=torch.bool)], dim=1)
            new_positions = positions[:, -1:] + 1
            positions = torch.cat([positions, new_positions], dim=1)
            if cache is None:
                fed, fed_positions = ids, positions
            else:
                fed, fed_positions = tokens, new_positions


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
