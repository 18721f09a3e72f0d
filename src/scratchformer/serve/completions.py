"""OpenAI's completions and chat completions for a language-model run: prompts encoded,
the requests decoded by the :class:`~.workers.DecodingWorker` among all others, the tokens
turned back into text (stop strings cut, whole characters only), whole or streamed as
server-sent events.

A chat is rendered to one prompt by the run's chat template (``chat_template.jinja`` in
the run directory: an imported checkpoint's, or the one a chat fine-tune trained on), by
:mod:`scratchformer.data.chat`, as ``transformers``' ``apply_chat_template`` renders it.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jinja2 import TemplateError

from ..data.chat import prompt_ids
from ..data.tokenizer import Tokenizer
from ..inference.engine import Request
from ..inference.grammar import Constraint
from ..inference.sampling import Sampling, TokenLogprob
from ..training.rundir import CHAT_TEMPLATE_FILE
from .errors import ApiError
from .schema import ChatRequest, CompletionRequest, Sampled
from .structured import request_grammar
from .workers import Busy, DecodingWorker, Progress

GONE_POLL_S = 0.1
"""How often a request answered whole looks whether its client is still there."""


class TextOf:
    """The text of a choice's tokens as it grows: cut before the first stop string, and,
    until the choice is done, short of anything a stop string or a character still being
    spelt out (a byte-level BPE token may hold part of one) might change."""

    def __init__(self, tokenizer: Tokenizer, stops: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.stops = list(stops)
        self.sent = 0
        self.decoded: tuple[int, str] = (0, "")
        """The text of the first tokens: a step's stop check and its new text decode once."""

    def full(self, tokens: Sequence[int]) -> tuple[str, bool]:
        """The text of ``tokens`` (a choice's first tokens) up to the first stop string, and
        whether one was met."""
        if self.decoded[0] != len(tokens):
            self.decoded = (len(tokens), self.tokenizer.decode(tokens))
        text = self.decoded[1]
        cuts = [i for i in (text.find(stop) for stop in self.stops) if i >= 0]
        return (text[: min(cuts)], True) if cuts else (text, False)

    def new(self, tokens: Sequence[int], done: bool) -> str:
        """The text not yet given out that is final now."""
        text, stopped = self.full(tokens)
        end = len(text)
        if not (done or stopped):
            held = max((len(stop) - 1 for stop in self.stops), default=0)
            end = len(text.rstrip("\ufffd")) - held
        piece = text[self.sent : max(end, self.sent)]
        self.sent = max(end, self.sent)
        return piece

    def stopped(self, tokens: Sequence[int]) -> bool:
        return bool(self.stops) and self.full(tokens)[1]


Scored = tuple[int, TokenLogprob | None]
"""A token of a choice's log-probabilities: its id, and what the model gave it (None for
the prompt's first token, which nothing precedes)."""


@dataclass
class Choice:
    """One choice of a response: its request to the decoder, its text so far, and the
    log-probabilities of its tokens (if asked for), in ``pieces`` and ``scored`` a part for
    each step it moved on."""

    index: int
    request: Request
    text: TextOf
    prefix: str = ""
    finish_reason: str | None = None
    pieces: list[str] = field(default_factory=list)
    scored: list[list[Scored]] = field(default_factory=list)
    logged: int = 0
    """New tokens whose log-probabilities are in ``scored``."""
    offset: int = 0
    """Characters of the tokens whose log-probabilities were given out."""

    def new_scores(self, count: int, done: bool) -> list[Scored]:
        """The log-probabilities not yet given out, up to the first ``count`` new tokens
        (all of them once ``done``: the eos token's too): the prompt's first, if it was
        scored."""
        request = self.request
        prompt: list[Scored] = []
        if request.score_prompt and not self.scored:
            prompt = [(request.prompt[0], None), *((s.token, s) for s in request.prompt_logprobs)]
        end = len(request.token_logprobs) if done else count
        new = [(s.token, s) for s in request.token_logprobs[self.logged : end]]
        self.logged = max(self.logged, end)
        return prompt + new


@dataclass
class Decoding:
    """What a language-model run's endpoints share."""

    tokenizer: Tokenizer
    worker: DecodingWorker
    context: int
    """Positions of a row: a prompt and its new tokens must fit."""
    name: str
    timeout: float
    chat_template: str | None

    def prompts(self, body: CompletionRequest) -> list[list[int]]:
        """The token ids of each prompt of a completion request."""
        prompt = body.prompt
        if isinstance(prompt, str):
            prompt = [prompt]
        if prompt and isinstance(prompt[0], int):
            prompt = [prompt]  # one prompt of token ids
        prompts = []
        for one in prompt:
            ids = self.tokenizer.encode(one) if isinstance(one, str) else list(one)
            if not ids:
                raise ApiError(400, "a prompt is empty: give it some text", "prompt")
            if any(not 0 <= i < self.tokenizer.vocab_size for i in ids):
                raise ApiError(
                    400, f"token ids go from 0 to {self.tokenizer.vocab_size - 1}", "prompt"
                )
            prompts.append(ids)
        return prompts

    def chat_prompt(self, body: ChatRequest) -> list[int]:
        """The chat rendered by the run's template, encoded."""
        if self.chat_template is None:
            raise ApiError(
                400,
                f"{self.name} has no chat template ({CHAT_TEMPLATE_FILE} in the run "
                "directory): use /v1/completions",
                "messages",
            )
        messages = []
        for message in body.messages:
            try:
                content = message.text()
            except ValueError as error:
                raise ApiError(400, str(error), "messages") from None
            messages.append({**message.model_dump(exclude_none=True), "content": content})
        try:
            ids = prompt_ids(self.chat_template, messages, self.tokenizer)
        except TemplateError as error:
            raise ApiError(
                400, f"the chat template refused the messages: {error}", "messages"
            ) from None
        if not ids:
            raise ApiError(400, "the chat renders to no tokens", "messages")
        return ids

    def choices(
        self,
        prompts: list[list[int]],
        body: Sampled,
        max_tokens: int | None,
        prefixes: list[str],
        logprobs: int | None = None,
        echo: bool = False,
    ) -> list[Choice]:
        """The requests of ``body``'s ``n`` choices for each prompt, with their stop
        strings, sampling and structured output, and the ``logprobs`` likeliest tokens at
        each place (None: no log-probabilities; of the prompt's tokens too with ``echo``);
        refused with a 400 if they do not fit a row."""
        unsupported = body.unsupported()
        if unsupported:
            raise ApiError(
                400, f"{', '.join(unsupported)}: not supported by this server", unsupported[0]
            )
        grammar = request_grammar(body, self.tokenizer)
        vocab = self.worker.engine.model.config.vocab_size
        stops = body.stop or []
        sampling = Sampling(
            temperature=body.temperature, top_p=None if body.top_p == 1 else body.top_p
        )
        choices = []
        for p, (prompt, prefix) in enumerate(zip(prompts, prefixes, strict=True)):
            wanted = max_tokens if max_tokens is not None else self.context - len(prompt)
            if len(prompt) + wanted > self.context:
                raise ApiError(
                    400,
                    f"this model's context is {self.context} tokens; the prompt has "
                    f"{len(prompt)} and max_tokens={wanted} more were asked for",
                    "max_tokens",
                )
            for j in range(body.n):
                text = TextOf(self.tokenizer, stops)
                request = Request(
                    prompt,
                    wanted,
                    sampling,
                    seed=None if body.seed is None else body.seed + j,
                    eos_id=self.tokenizer.eos_id,
                    stop=text.stopped if stops else None,
                    logprobs=logprobs,
                    score_prompt=echo and logprobs is not None,
                    constraint=grammar and Constraint(grammar, self.tokenizer, vocab),
                )
                choices.append(Choice(p * body.n + j, request, text, prefix))
        return choices

    def submit(self, choices: list[Choice]) -> asyncio.Queue:
        """Queue the choices' requests (429 if the queue is full): their steps arrive on
        the returned queue."""
        try:
            return self.worker.submit([choice.request for choice in choices])
        except Busy as error:
            raise ApiError(429, f"the server is busy ({error}): try again shortly", None) from None

    async def progress(self, choices: list[Choice], queue: asyncio.Queue) -> AsyncIterator[Choice]:
        """Each choice whenever it moves on, its new text in ``pieces``; choices that have
        not finished in ``timeout`` seconds end with a 504. Leaving early (a client gone)
        frees every row at once."""
        by_request = {choice.request: choice for choice in choices}
        left = len(choices)
        deadline = time.monotonic() + self.timeout
        try:
            while left:
                try:
                    request, progress = await asyncio.wait_for(
                        queue.get(), deadline - time.monotonic()
                    )
                except TimeoutError:
                    raise ApiError(504, f"no answer within {self.timeout:g} s", None) from None
                choice = by_request[request]
                if progress.error is not None:
                    raise ApiError(500, f"decoding failed: {progress.error}", None)
                update(choice, progress)
                left -= choice.finish_reason is not None
                yield choice
        finally:
            for choice in choices:
                choice.request.cancelled = True  # a no-op for the finished ones

    async def complete(
        self,
        choices: list[Choice],
        build: Callable[[Choice, str, list[Scored]], dict[str, Any]],
        gone: Callable[[], Awaitable[bool]],
    ) -> list[dict[str, Any]]:
        """Every choice run to its end: ``build(choice, text, scored)`` of each (its whole
        text and log-probabilities), in order. A client
        that leaves before (``gone()`` is polled every :data:`GONE_POLL_S`) frees the rows
        at once, and hears a 499 it will never read."""

        async def run() -> None:
            async for _ in self.progress(choices, queue):
                pass

        queue = self.submit(choices)
        work = asyncio.ensure_future(run())
        while not (await asyncio.wait({work}, timeout=GONE_POLL_S))[0]:
            if await gone():
                work.cancel()  # progress's finally cancels the requests
                raise ApiError(499, "the client went away before the answer", None)
        work.result()
        return [
            build(
                choice,
                choice.prefix + "".join(choice.pieces),
                [s for part in choice.scored for s in part],
            )
            for choice in choices
        ]

    def usage(self, choices: list[Choice], prompts: list[list[int]]) -> dict[str, int]:
        prompt_tokens = sum(len(p) for p in prompts)
        completion = sum(len(choice.request.tokens) for choice in choices)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        }


def update(choice: Choice, progress: Progress) -> None:
    """Take in a step of ``choice``: its new text, and its end if it ended."""
    tokens = choice.request.tokens[: progress.count]
    done = progress.finish_reason is not None
    choice.pieces.append(choice.text.new(tokens, done))
    if choice.request.logprobs is not None:
        choice.scored.append(choice.new_scores(progress.count, done))
    if done:
        choice.finish_reason = progress.finish_reason


def completion_logprobs(
    tokenizer: Tokenizer, choice: Choice, scored: list[Scored]
) -> dict[str, Any] | None:
    """The next ``scored`` tokens of ``choice`` in a completion's ``logprobs``: each token's
    text, log-probability, likeliest tokens at its place, and where its text begins in the
    choice's (the text of each token decoded alone, as vLLM gives it)."""
    if choice.request.logprobs is None:
        return None
    texts = [tokenizer.decode([token]) for token, _ in scored]
    offsets = []
    for text in texts:
        offsets.append(choice.offset)
        choice.offset += len(text)
    return {
        "tokens": texts,
        "token_logprobs": [None if s is None else s.logprob for _, s in scored],
        "top_logprobs": [
            None if s is None else {tokenizer.decode([t]): value for t, value in s.top}
            for _, s in scored
        ],
        "text_offset": offsets,
    }


def chat_logprobs(tokenizer: Tokenizer, choice: Choice, scored: list[Scored]) -> dict | None:
    """The next ``scored`` tokens of ``choice`` in a chat completion's ``logprobs``."""
    if choice.request.logprobs is None:
        return None

    def entry(token: int, logprob: float) -> dict[str, Any]:
        text = tokenizer.decode([token])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    content = [
        {**entry(token, s.logprob), "top_logprobs": [entry(t, value) for t, value in s.top]}
        for token, s in scored
        if s is not None
    ]
    return {"content": content, "refusal": None}


def identity(kind: str) -> dict[str, Any]:
    """The fields every response of an endpoint begins with."""
    return {"id": f"{kind}-{uuid.uuid4().hex}", "created": int(time.time())}


def sse(payload: dict[str, Any] | str) -> str:
    """One server-sent event: ``data: <json>`` (or the ``[DONE]`` marker)."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n"
