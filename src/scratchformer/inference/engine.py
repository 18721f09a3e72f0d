"""The decoding engine: every language-model decoding runs here, for every caller.

``scratchformer generate`` and the Python :func:`~.generate.stream` are the engine with
their prompts as requests; ``scratchformer serve`` steps it from its decoding thread while
requests come and go. What a step runs (the model, compiled or exported ahead of time),
how each token is chosen (:class:`~.sampling.Sampling`), where decoding stops and what a
request learns of its tokens' log-probabilities are decided here, once.

Every request owns a row (a *slot*) of one KV cache for as long as it decodes: it joins at
a step boundary (its prompt run through the model alone, its keys and values copied into a
free row) and leaves when it ends, its row free for the next request. A request with no
new token to decode (``max_new_tokens=0``, its prompt scored) never takes a row.

Rows are kept right-aligned: the tokens of every row end at the cache's shared length,
each row starting where its own length puts it, the columns before masked out. A step
feeds every live row its last token at that row's own position and writes the keys and
values at the shared length. A prompt longer than the shared length moves every row right
(padding on the left); when the shared length reaches the end of the cache, the columns
that no live row uses are cut from the left. Each row thus computes what it would compute
alone, so greedy tokens do not depend on what else is in the batch.

Compiled (``compiled=True``), the steps run on the CPU through an
:class:`~.exported.ExportedLM` (the step compiled ahead of time, for any number of rows
and any length of the cache), elsewhere through a :class:`~.compiled.CompiledModel`, their
number of rows and the cache's size marked dynamic: the graphs of a first generation serve
every later one, whatever its length (but the very first step of a batch, whose cache holds
one token, runs eagerly). The engine
compiles when it is made, or in :meth:`Engine.warm_up`, not for a request, under the
caller's autocast. A step feeds at least two rows of a batch of several (a free one
computes for nothing), since a dimension of size one is specialized. Prompts are
prefilled eagerly, one per request, whose lengths would otherwise each compile a graph.

Without a cache (``use_cache=False``, for tests and benchmarks) every step recomputes the
whole of every live row, left-padded into one batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ..data.batching import pad_batch
from ..device import decoding_device
from .cache import SPARE, DecoderCache, KVCache
from .dynamic_rows import LEAST_ROWS
from .kernels import attention_kernels, installed, linear_kernels
from .prefix_cache import PrefixCache
from .sampling import NO_TOKEN, Sampling, TokenLogprob, ended_without_a_token, token_logprobs

if TYPE_CHECKING:
    from .grammar import Constraint  # (the grammar library: loaded when a request has one)

GREEDY = Sampling(greedy=True)
NO_HISTORY = torch.empty(1, 0, dtype=torch.long)
"""The tokens so far (and their mask), for a sampling that does not read them."""


@dataclass(eq=False)
class Request:
    """A prompt to continue, how, and (filled in by decoding) what came of it.

    ``tokens`` grows by one token a step; ``finish_reason`` becomes ``"stop"`` (at
    ``eos_id``, which is not kept, where the sampling's constraints leave no token, or
    after a token for which ``stop(tokens)`` is true) or ``"length"`` (``max_new_tokens``
    reached). With ``logprobs`` (how many of the likeliest tokens to give at each
    position, 0 for none), ``token_logprobs`` holds a :class:`~.sampling.TokenLogprob` for
    every new token (and for the eos token that ended it, which is not in ``tokens``) and,
    with ``score_prompt`` too, ``prompt_logprobs`` one for every prompt token but the
    first (which nothing precedes): the model's own, before a ``constraint`` (structured
    output, :mod:`~.grammar`) masks the tokens it does not allow; a constrained request
    ends once nothing may follow. ``max_new_tokens=0`` decodes nothing (the prompt is
    scored if asked, and the request never takes a row). Setting
    ``cancelled`` frees the request's row at the next step boundary."""

    prompt: list[int]
    max_new_tokens: int
    sampling: Sampling = GREEDY
    seed: int | None = None
    eos_id: int | None = None
    stop: Callable[[list[int]], bool] | None = None
    logprobs: int | None = None
    score_prompt: bool = False
    constraint: Constraint | None = None
    tokens: list[int] = field(default_factory=list)
    token_logprobs: list[TokenLogprob] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    cancelled: bool = False

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError("the prompt needs at least one token")
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} must be >= 0")
        if self.score_prompt and self.logprobs is None:
            raise ValueError("score_prompt needs logprobs (0 for the tokens' own only)")
        self.takes_argmax = (
            self.sampling.is_argmax and self.constraint is None and self.logprobs is None
        )
        """Whether its next token is the argmax of the logits, and nothing else of them is
        read: it may take a step's greedy token (:meth:`accept`) instead of choosing."""
        self.generator = torch.Generator()
        if self.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(self.seed)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def choose(self, logits: Tensor, allowed: Tensor | None = None) -> None:
        """Draw the next token from the logits ``(vocab,)`` of the last position, among
        the tokens its constraint allows (``allowed``, if its mask is filled already), and
        finish if it ends the request."""
        ids = mask = NO_HISTORY
        if self.sampling.reads_history:
            ids = torch.tensor([self.prompt + self.tokens], dtype=torch.long)
            mask = torch.ones_like(ids)
        shown = logits
        if self.constraint is not None:
            if allowed is None:
                allowed = torch.empty(logits.shape[-1], dtype=torch.bool)
                self.constraint.fill(allowed)
            shown = logits.masked_fill(~allowed.to(logits.device), float("-inf"))
        token = int(self.sampling(shown[None], ids, mask, self.generator))
        if token == NO_TOKEN:
            ended_without_a_token()
        if token != NO_TOKEN and self.logprobs is not None:  # (eos's too: OpenAI's lists it)
            chosen = torch.tensor([token], device=logits.device)
            self.token_logprobs += token_logprobs(logits[None], chosen, self.logprobs)
        self.accept(token)

    def accept(self, token: int) -> None:
        """Take ``token`` as the next one (:data:`~.sampling.NO_TOKEN`: none is left), and
        finish if it ends the request."""
        if token in (self.eos_id, NO_TOKEN):
            self.finish_reason = "stop"
            return
        self.tokens.append(token)
        if self.constraint is not None:
            self.constraint.advance(token)
        if (self.stop is not None and self.stop(self.tokens)) or (
            self.constraint is not None and self.constraint.finished
        ):
            self.finish_reason = "stop"
        elif len(self.tokens) >= self.max_new_tokens:
            self.finish_reason = "length"

    def read_prompt(self, logits: Tensor) -> None:
        """Take in the logits ``(prompt, vocab)`` of the whole prompt: its log-probabilities
        if asked for, and the first new token (unless none is wanted)."""
        if self.score_prompt:
            follow = torch.tensor(self.prompt[1:], device=logits.device)
            self.prompt_logprobs = token_logprobs(logits[:-1], follow, self.logprobs or 0)
        if self.max_new_tokens == 0:
            self.finish_reason = "length"
        else:
            self.choose(logits[-1].float())


@dataclass
class Prefilled:
    """A prompt run through the model: its keys and values (one row), and the logits of its
    positions computed (all of them if ``whole``; else the last ones, its start reused)."""

    cache: DecoderCache
    logits: Tensor
    whole: bool


@dataclass
class Rows:
    """The views of a step of the engine's first rows: their cache, its buffers (every
    layer's keys, then every layer's values), and their next positions."""

    cache: RowsCache
    buffers: list[Tensor]
    positions: Tensor


@dataclass
class RowsCache:
    """The first rows of the engine's keys and values, as a decoder-only stack's cache."""

    self_attn: list[KVCache]

    @property
    def cross_attn(self) -> list[None]:
        return [None] * len(self.self_attn)

    @property
    def length(self) -> int:
        return self.self_attn[0].length


class Engine:
    """Decode the requests :meth:`add` gives it, up to ``max_batch`` at once, in a KV cache
    of ``max_len`` positions a row: a request's prompt and new tokens must fit there.
    :meth:`step` runs one step; the caller (a server's decoding thread, or
    :func:`~.generate.stream`) loops on it. ``compiled``: the steps compiled (see the
    module docstring); ``use_cache=False``: every step recomputes every row; ``prefixes``:
    a prompt that begins with one run before computes only the rest
    (:mod:`~.prefix_cache`)."""

    def __init__(
        self,
        model: nn.Module,
        max_batch: int,
        max_len: int,
        compiled: bool = False,
        use_cache: bool = True,
        prefixes: PrefixCache | None = None,
    ) -> None:
        given_compiled = getattr(model, "is_compiled", False)
        self.model = model.model if given_compiled else model
        """The model itself, which reads prompts eagerly (each length would compile)."""
        self.prefixes = prefixes if use_cache else None
        """Where prompts' keys and values are kept for the prompts that begin alike."""
        self.compiled = compiled or given_compiled
        """Whether the steps run compiled (here, or by the caller: a ``Compiled`` model)."""
        self.use_cache = use_cache
        self.device = decoding_device(model)
        config = model.config
        if config.positional == "learned" and max_len > config.max_len:
            raise ValueError(
                f"a row of {max_len} positions (a prompt and its new tokens) exceeds the "
                f"model's max_len={config.max_len}"
            )
        capacity = max_len + SPARE
        fixed = getattr(model, "cache_capacity", capacity)  # (an ExportedLM's is fixed)
        if capacity > fixed:
            raise ValueError(
                f"a row of {max_len} positions needs a cache of {capacity}; "
                f"the model's holds {fixed}"
            )
        self.stepper = model
        """What runs a step: the model, or the model compiled (here or by the caller)."""
        if compiled and not given_compiled:
            self.stepper = compiled_stepper(model, max_batch, fixed)
        self.direct = self.stepper if hasattr(self.stepper, "run_step") else None
        """An ``ExportedLM``: its compiled step is called directly."""
        self.dynamic = self.compiled and self.direct is None
        """Whether the step goes through ``torch.compile``, the rows' number dynamic."""
        self.rows_views: dict[int, Rows] = {}
        self.max_batch = max_batch
        self.max_len = max_len
        self.waiting: deque[Request] = deque()
        self.slots: list[Request | None] = [None] * max_batch
        layout = DecoderCache(model.decoder, max_batch, fixed).self_attn if use_cache else []
        self.buffers = [(cache.keys, cache.values) for cache in layout]
        if self.direct is not None and self.buffers:
            self.direct.check_cache(self.buffers[0][0].dtype)
        self.mask = torch.zeros(max_batch, max_len, dtype=torch.bool, device=self.device)
        self.positions = torch.zeros(max_batch, dtype=torch.long, device=self.device)
        self.last = [0] * max_batch
        """Each row's last token, which the next step feeds it."""
        self.fed: Tensor | None = None
        """The last step's greedy tokens ``(rows, 1)``, when every live row took its own:
        the next step feeds them as they are (the same tokens as :attr:`last`)."""
        self.length = 0
        """The shared length: every live row's tokens end here."""
        self.kernels = attention_kernels(model) + linear_kernels(model, max_batch)
        """Installed for each call of the model, found once."""

    def warm_up(self) -> None:
        """Decode a request of a few tokens and forget it: a compiled step compiles its
        graphs now (a cache of one token, then of any length: tens of seconds each), under
        the caller's settings (autocast, which they keep)."""
        self.add(Request([0], max_new_tokens=3))
        while not self.idle:
            self.step()
        self.reset()

    def check(self, request: Request) -> None:
        """ValueError unless ``request``'s prompt and new tokens fit a row."""
        needed = len(request.prompt) + request.max_new_tokens
        if needed > self.max_len:
            raise ValueError(
                f"the prompt ({len(request.prompt)} tokens) + max_new_tokens="
                f"{request.max_new_tokens} exceeds the {self.max_len} positions of a row"
            )

    def add(self, request: Request) -> None:
        """Queue ``request`` (checked as :meth:`check` does); it takes a row at the first
        step with one free."""
        self.check(request)
        self.waiting.append(request)

    def reset(self) -> None:
        """Drop every request, live or waiting: the batch starts afresh."""
        self.waiting.clear()
        self.slots = [None] * self.max_batch
        self.mask.zero_()
        self.length = 0
        self.fed = None

    @property
    def live(self) -> list[Request]:
        return [request for request in self.slots if request is not None]

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.live

    @torch.no_grad()
    def step(self) -> list[Request]:
        """Free the rows of cancelled requests, let waiting requests join (each drawing its
        first token from its prompt), and decode one token for every live row. Returns the
        requests that moved on, done or not; their rows are free again once done."""
        for slot, request in enumerate(self.slots):
            if request is not None and request.cancelled:
                self.free(slot)
        moved = []
        if self.waiting:
            with installed(self.kernels):
                moved = self.admit()
            self.free_finished()
        running = [(slot, request) for slot, request in enumerate(self.slots) if request]
        if running:
            self.advance(running)
        for slot, request in running:
            self.last[slot] = request.tokens[-1] if request.tokens else 0
            if request not in moved:
                moved.append(request)
        self.free_finished()
        return moved

    def free_finished(self) -> None:
        for slot, request in enumerate(self.slots):
            if request is not None and request.done:
                self.free(slot)

    def admit(self) -> list[Request]:
        """Give free rows to waiting requests: each prompt run alone, its first token
        drawn, its keys and values copied in right-aligned. A request that only scores its
        prompt is done with that, without a row."""
        joined = []
        self.fed = None  # (a row may change hands: its last token is the new request's)
        prompts: dict[tuple[int, ...], Prefilled] = {}
        """The prompts run in this call, for the requests that share them (n choices)."""
        while self.waiting and (None in self.slots or self.waiting[0].max_new_tokens == 0):
            request = self.waiting.popleft()
            if request.cancelled:
                continue
            joined.append(request)
            if request.max_new_tokens == 0:  # (nothing to decode: the prompt scored, if asked)
                if request.score_prompt:
                    request.read_prompt(self.prompt_logits(request.prompt)[0])
                request.finish_reason = "length"
                continue
            slot = self.slots.index(None)
            self.slots[slot] = request
            if self.use_cache:  # (else the first step reads the prompt)
                self.prefill(slot, request, prompts)
        return joined

    def advance(self, running: list[tuple[int, Request]]) -> None:
        """Decode one token for each of the ``running`` ``(slot, request)`` pairs."""
        rows = running[-1][0] + 1
        if self.use_cache:
            logits, greedy = self.decode_step(rows)
            argmax = None if greedy is None else greedy.tolist()
            chosen = [r for _, r in running if argmax is None or not r.takes_argmax]
            masks = allowed_tokens(chosen, logits.shape[-1])
            scores = logits[:, -1].float() if chosen else None
            for slot, request in running:
                if argmax is not None and request.takes_argmax:
                    request.accept(argmax[slot][0])
                else:
                    request.choose(scores[slot], masks.get(request))
            self.fed = None if chosen else greedy
            return
        logits = self.recompute(rows)
        for slot, request in running:
            if request.tokens:
                request.choose(logits[slot, -1].float())
            else:  # (its first step)
                request.read_prompt(logits[slot, -len(request.prompt) :])

    def prompt_logits(self, prompt: list[int], cache: DecoderCache | None = None) -> Tensor:
        """The logits ``(1, new, vocab)`` of the ``new`` tokens of a prompt run alone that
        ``cache`` (if any) does not hold yet, computed into it."""
        done = 0 if cache is None else cache.length
        ids = torch.tensor([prompt[done:]], device=self.device)
        mask = torch.ones(1, len(prompt), dtype=torch.bool, device=self.device)
        return self.model(ids, mask, cache=cache).logits

    def prefill(
        self, slot: int, request: Request, prompts: dict[tuple[int, ...], Prefilled]
    ) -> None:
        """Run ``request``'s prompt (whatever of it ``prompts`` or the prefix cache does not
        hold) and copy its keys and values into row ``slot``, right-aligned."""
        prompt = request.prompt
        size = len(prompt)
        prefilled = prompts.get(tuple(prompt))
        if prefilled is None or (request.score_prompt and not prefilled.whole):
            cache = DecoderCache(self.model.decoder, 1, size)
            if self.prefixes is not None and not request.score_prompt:  # (scored: all logits)
                self.prefixes.reuse(prompt, cache)
            whole = cache.length == 0
            prefilled = Prefilled(cache, self.prompt_logits(prompt, cache)[0], whole)
            if self.prefixes is not None:
                self.prefixes.keep(prompt, cache)
            prompts[tuple(prompt)] = prefilled
        request.read_prompt(prefilled.logits)
        if not any(r is not None and r is not request for r in self.slots):
            self.length = 0  # (no other row lives: nothing to move)
        if self.length == self.max_len:
            self.shift(-self.unused_columns())
        if self.length < size:  # (also after a cut: the live rows may be shorter)
            self.shift(size - self.length)
        start = self.length - size
        for (keys, values), layer in zip(self.buffers, prefilled.cache.self_attn, strict=True):
            keys[slot, :, start : self.length] = layer.keys[0]
            values[slot, :, start : self.length] = layer.values[0]
        self.mask[slot] = False
        self.mask[slot, start : self.length] = True
        self.positions[slot] = size
        self.last[slot] = request.tokens[-1] if request.tokens else 0

    def decode_step(self, rows: int) -> tuple[Tensor, Tensor | None]:
        """The logits ``(rows', 1, vocab)`` (``rows'``: at least ``rows``) after feeding
        rows ``0 .. rows - 1`` their last token (free rows among them compute on what their
        row holds, and are ignored), and each row's greedy token ``(rows', 1)`` where the
        exported step gave them (else None)."""
        if self.compiled:
            rows = max(rows, min(LEAST_ROWS, self.max_batch))
        if self.length == self.max_len:
            self.shift(-self.unused_columns())
        end = self.length + 1
        self.mask[:rows, self.length] = True
        views = self.views(rows)
        last = self.fed
        if last is None or last.shape[0] != rows:
            last = torch.tensor(self.last[:rows], device=self.device)[:, None]
        mask = self.mask[:rows, :end].contiguous()  # (the same strides at any length)
        greedy = None
        if self.direct is not None and self.direct.takes(rows, self.length):
            logits, _, greedy = self.direct.run_step(
                last, mask, views.positions, self.length, views.buffers
            )
        else:
            for layer in views.cache.self_attn:
                layer.length = self.length
            if self.dynamic:  # (torch.compile's rows: any number; the views are marked)
                for tensor in (last, mask):
                    torch._dynamo.maybe_mark_dynamic(tensor, 0)
            with installed(self.kernels):
                output = self.stepper(last, mask, cache=views.cache, positions=views.positions)
            logits = output.logits
        self.length = end
        views.positions.add_(1)
        return logits, greedy

    def views(self, rows: int) -> Rows:
        """What a step of the first ``rows`` rows reads and writes, made once for each
        number of rows: views of the engine's tensors, which stay where they are. For
        ``torch.compile`` their rows, and the caches' size, are marked dynamic once here."""
        found = self.rows_views.get(rows)
        if found is None:
            cache = RowsCache([KVCache(k[:rows], v[:rows]) for k, v in self.buffers])
            layers = cache.self_attn
            buffers = [layer.keys for layer in layers] + [layer.values for layer in layers]
            found = self.rows_views[rows] = Rows(cache, buffers, self.positions[:rows, None])
            if self.dynamic:
                for tensor in (found.positions, *buffers):
                    torch._dynamo.maybe_mark_dynamic(tensor, 0)
                for tensor in buffers:
                    torch._dynamo.maybe_mark_dynamic(tensor, 2)
        return found

    def recompute(self, rows: int) -> Tensor:
        """The logits ``(rows, length, vocab)`` of rows ``0 .. rows - 1``, each row's prompt
        and tokens so far run again, left-padded into one batch (a free row as one token)."""
        sequences = [[0] if r is None else r.prompt + r.tokens for r in self.slots[:rows]]
        ids, mask = pad_batch(sequences, 0, left=True)
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        with installed(self.kernels):
            return self.model(ids, mask, positions=positions).logits

    def unused_columns(self) -> int:
        """Columns on the left that no live row reads (every column, with no live row)."""
        live = [slot for slot, request in enumerate(self.slots) if request is not None]
        starts = [int(self.mask[slot].int().argmax()) for slot in live]
        return min(starts, default=self.length)

    def shift(self, by: int) -> None:
        """Move the columns of every row ``by`` to the right (negative: to the left); the
        columns that come in are masked out."""
        kept = self.length - max(0, -by)
        for tensor, dim in [(self.mask, 1), *((t, 2) for pair in self.buffers for t in pair)]:
            moved = tensor.narrow(dim, max(0, -by), kept).clone()
            tensor.narrow(dim, max(0, by), kept).copy_(moved)
        self.mask[:, : max(0, by)] = False
        self.length += by

    def free(self, slot: int) -> None:
        self.slots[slot] = None
        self.mask[slot] = False


def allowed_tokens(requests: list[Request], vocab: int) -> dict[Request, Tensor]:
    """The allowed-token masks ``(vocab,)`` of the constrained ``requests``' next tokens,
    computed together (the grammar library's threads share the rows)."""
    constrained = [request for request in requests if request.constraint is not None]
    if not constrained:
        return {}
    from .grammar import fill_masks

    masks = torch.empty(len(constrained), vocab, dtype=torch.bool)
    fill_masks([request.constraint for request in constrained], masks)
    return dict(zip(constrained, masks, strict=True))


def compiled_stepper(model: nn.Module, max_batch: int, capacity: int) -> nn.Module:
    """``model`` compiled for the engine's steps on caches of ``capacity`` positions a row,
    under the caller's autocast: its step compiled ahead of time on the CPU (where that was
    measured) if the model's context holds them, else ``torch.compile``."""
    if exported_step(model, capacity - SPARE):
        from .exported import ExportedLM  # (torch's compiler: imported when asked for)

        bf16 = torch.is_autocast_enabled("cpu")
        fewest = LEAST_ROWS if max_batch > 1 else None
        return ExportedLM(model, max_batch, capacity, bf16, fewest_rows=fewest)
    from .compiled import CompiledModel

    return CompiledModel(model)


def exported_step(model: nn.Module, max_len: int) -> bool:
    """Whether the engine's compiled step for rows of ``max_len`` positions is an
    :class:`~.exported.ExportedLM`: on the CPU (where it was measured), if the model's
    context holds them."""
    return decoding_device(model).type == "cpu" and max_len <= model.config.max_len
