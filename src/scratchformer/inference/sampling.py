"""How the next token is chosen, and how likely the model found it.

Each step turns the logits of the last position into the next token: first the penalties
that also apply to greedy decoding (repetition penalty, n-gram ban), then temperature,
top-k and top-p, then the argmax or a draw. Each logits processor is a small function on
``(batch, vocab)`` logits. The log-probabilities a caller may ask for are the model's own
(a log-softmax of its logits), before any of them, as OpenAI's API and vLLM give them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor


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
    beyond = before >= p
    beyond[..., 0] = False  # (a p too small for the dtype, 0 in it, keeps the likeliest)
    ordered = ordered.masked_fill(beyond, float("-inf"))
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
    def takes_largest(self) -> bool:
        """Whether the choice is the argmax of the (penalized) logits: greedy, or no
        temperature."""
        return self.greedy or self.temperature == 0

    @property
    def is_argmax(self) -> bool:
        """Whether the choice is the argmax of the logits, and nothing else: greedy, with
        no penalty or ban."""
        return self.takes_largest and not self.reads_history

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
        if self.takes_largest:
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


@dataclass(frozen=True)
class TokenLogprob:
    """A token and its log-probability under the model, with the ``top`` likeliest tokens
    at its position (``(token, logprob)`` pairs, likeliest first; empty if none was asked)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprobs(logits: Tensor, tokens: Tensor, top: int) -> list[TokenLogprob]:
    """The log-probability of ``tokens[i]`` under the logits ``logits[i]`` (``(n, vocab)``),
    each with the ``top`` likeliest tokens of its row: the model's own log-softmax, before
    temperature, top-k or top-p."""
    logprobs = logits.float().log_softmax(dim=-1)
    chosen = logprobs.gather(-1, tokens[:, None]).squeeze(-1).tolist()
    best_values, best_ids = logprobs.topk(top, dim=-1) if top else (logprobs[:, :0],) * 2
    return [
        TokenLogprob(token, value, tuple(zip(ids, values, strict=True)))
        for token, value, ids, values in zip(
            tokens.tolist(), chosen, best_ids.tolist(), best_values.tolist(), strict=True
        )
    ]
