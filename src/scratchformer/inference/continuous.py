"""Continuous batching: decoding requests that join and leave one running batch.

A server answers requests that arrive at any time and want different numbers of tokens.
Decoding them one at a time leaves most of a step's work unshared; decoding them in fixed
batches holds a short request behind the longest of its batch. Here every request owns a
row (a *slot*) of one KV cache for as long as it decodes: it joins at a step boundary (its
prompt run through the model alone, its keys and values copied into a free row) and leaves
when it ends, its row free for the next request.

Rows are kept right-aligned: the tokens of every row end at the cache's shared length,
each row starting where its own length puts it, the columns before masked out, as in the
left-padded batches of :func:`~.generate.stream`. A step feeds every live row its last
token at that row's own position and writes the keys and values at the shared length. A
prompt longer than the shared length moves every row right (padding on the left); when the
shared length reaches the end of the cache, the columns that no live row uses are cut from
the left. Each row thus computes what it would compute alone, so greedy tokens do not
depend on what else is in the batch.

Compiled (``compiled=True``), the steps run on the CPU through an
:class:`~.exported.ExportedLM` (the step compiled ahead of time, for any number of rows
and any length of the cache), elsewhere through a :class:`~.compiled.CompiledModel`, their
number of rows and the cache's length marked dynamic: one graph serves every step (but the
very first of a batch, whose cache holds one token, which runs eagerly). The batcher
compiles when it is made, or in :meth:`ContinuousBatcher.warm_up`, not for a request, under
the caller's autocast. A step feeds at least two rows (a free one computes for nothing),
since a dimension of size one is specialized. Prompts are prefilled eagerly, one per
request, whose lengths would otherwise each compile a graph.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from .cache import SPARE, DecoderCache, KVCache
from .dynamic_rows import LEAST_ROWS
from .generate import NO_TOKEN, Sampling, decoding_device, ended_without_a_token
from .kernels import attention_kernels, installed

GREEDY = Sampling(greedy=True)


@dataclass(eq=False)
class Request:
    """A prompt to continue, how, and (filled in by decoding) what came of it.

    ``tokens`` grows by one token a step; ``finish_reason`` becomes ``"stop"`` (at
    ``eos_id``, which is not kept, where the sampling's constraints leave no token, or
    after a token for which ``stop(tokens)`` is true) or
    ``"length"`` (``max_new_tokens`` reached). Setting ``cancelled`` frees the request's
    row at the next step boundary."""

    prompt: list[int]
    max_new_tokens: int
    sampling: Sampling = GREEDY
    seed: int | None = None
    eos_id: int | None = None
    stop: Callable[[list[int]], bool] | None = None
    tokens: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    cancelled: bool = False

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError("the prompt needs at least one token")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} must be >= 1")
        self.generator = torch.Generator()
        if self.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(self.seed)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def choose(self, logits: Tensor) -> None:
        """Draw the next token from the logits ``(vocab,)`` of the last position, and
        finish if it ends the request."""
        history = self.prompt + self.tokens if self.sampling.reads_history else []
        ids = torch.tensor([history], dtype=torch.long)
        token = int(self.sampling(logits[None], ids, torch.ones_like(ids), self.generator))
        if token == NO_TOKEN:
            ended_without_a_token()
        if token in (self.eos_id, NO_TOKEN):
            self.finish_reason = "stop"
            return
        self.tokens.append(token)
        if self.stop is not None and self.stop(self.tokens):
            self.finish_reason = "stop"
        elif len(self.tokens) >= self.max_new_tokens:
            self.finish_reason = "length"


@dataclass
class RowsCache:
    """The first rows of the batcher's keys and values, as a decoder-only stack's cache."""

    self_attn: list[KVCache]

    @property
    def cross_attn(self) -> list[None]:
        return [None] * len(self.self_attn)

    @property
    def length(self) -> int:
        return self.self_attn[0].length


class ContinuousBatcher:
    """Decode the requests :meth:`add` gives it, up to ``max_batch`` at once, in a KV cache
    of ``max_len`` positions a row: a request's prompt and new tokens must fit there.
    :meth:`step` runs one step; the caller (a server's decoding thread) loops on it.
    ``compiled``: the steps through ``torch.compile`` (see the module docstring)."""

    def __init__(
        self, model: nn.Module, max_batch: int, max_len: int, compiled: bool = False
    ) -> None:
        self.model = model
        self.compiled = compiled
        self.device = decoding_device(model)
        self.stepper = compiled_stepper(model, max_batch, max_len) if compiled else model
        """What runs a step: the model, or the model compiled."""
        self.max_batch = max_batch
        self.max_len = max_len
        self.waiting: deque[Request] = deque()
        self.slots: list[Request | None] = [None] * max_batch
        layout = DecoderCache(model.decoder, max_batch, max_len + SPARE)
        self.buffers = [(cache.keys, cache.values) for cache in layout.self_attn]
        self.mask = torch.zeros(max_batch, max_len, dtype=torch.bool, device=self.device)
        self.positions = torch.zeros(max_batch, dtype=torch.long, device=self.device)
        self.last = torch.zeros(max_batch, dtype=torch.long, device=self.device)
        self.length = 0
        """The shared length: every live row's tokens end here."""
        self.kernels = attention_kernels(model)
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
        moved = self.admit()
        self.free_finished()
        running = [(slot, request) for slot, request in enumerate(self.slots) if request]
        if running:
            with installed(self.kernels):
                logits = self.decode_step(running[-1][0] + 1)
            for slot, request in running:
                request.choose(logits[slot])
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
        drawn, its keys and values copied in right-aligned."""
        joined = []
        while self.waiting and None in self.slots:
            request = self.waiting.popleft()
            if request.cancelled:
                continue
            slot = self.slots.index(None)
            self.slots[slot] = request
            self.prefill(slot, request)
            joined.append(request)
        return joined

    def prefill(self, slot: int, request: Request) -> None:
        size = len(request.prompt)
        ids = torch.tensor([request.prompt], device=self.device)
        cache = DecoderCache(self.model.decoder, 1, size)
        with installed(self.kernels):
            output = self.model(ids, torch.ones_like(ids, dtype=torch.bool), cache=cache)
        request.choose(output.logits[0, -1].float())
        if self.length == self.max_len:
            self.shift(-self.unused_columns())
        if self.length < size:  # (also after a cut: the live rows may be shorter)
            self.shift(size - self.length)
        start = self.length - size
        for (keys, values), layer in zip(self.buffers, cache.self_attn, strict=True):
            keys[slot, :, start : self.length] = layer.keys[0]
            values[slot, :, start : self.length] = layer.values[0]
        self.mask[slot] = False
        self.mask[slot, start : self.length] = True
        self.positions[slot] = size
        self.last[slot] = request.tokens[-1] if request.tokens else 0

    def decode_step(self, rows: int) -> Tensor:
        """The logits (one row each, at least ``rows``) after feeding rows ``0 .. rows - 1``
        their last token (free rows among them compute on what their row holds, and are
        ignored)."""
        if self.compiled:
            rows = max(rows, min(LEAST_ROWS, self.max_batch))
        if self.length == self.max_len:
            self.shift(-self.unused_columns())
        end = self.length + 1
        self.mask[:rows, self.length] = True
        cache = RowsCache([KVCache(k[:rows], v[:rows], self.length) for k, v in self.buffers])
        inputs = self.last[:rows, None], self.positions[:rows, None]
        mask = self.mask[:rows, :end]
        if self.compiled:
            mask = mask.contiguous()  # (the same strides at any length)
            buffers = [t for layer in cache.self_attn for t in (layer.keys, layer.values)]
            for tensor in (*inputs, mask, *buffers):  # (torch.compile's rows: any number)
                torch._dynamo.maybe_mark_dynamic(tensor, 0)
        output = self.stepper(inputs[0], mask, cache=cache, positions=inputs[1])
        self.length = end
        self.positions[:rows] += 1
        return output.logits[:, -1].float()

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


def compiled_stepper(model: nn.Module, max_batch: int, max_len: int) -> nn.Module:
    """``model`` compiled for the batcher's steps, under the caller's autocast: its step
    compiled ahead of time on the CPU (where that was measured), else ``torch.compile``."""
    if decoding_device(model).type == "cpu":
        from .exported import ExportedLM  # (torch's compiler: imported when asked for)

        bf16 = torch.is_autocast_enabled("cpu")
        fewest = LEAST_ROWS if max_batch > 1 else None
        return ExportedLM(model, max_batch, max_len + SPARE, bf16, fewest_rows=fewest)
    from .compiled import CompiledModel

    return CompiledModel(model)
