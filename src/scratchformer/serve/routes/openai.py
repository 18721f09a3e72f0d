"""OpenAI's endpoints: completions and chat completions (a language model's run, decoded by
the decoding worker), whole or streamed, and embeddings (a sentence encoder's run)."""

from __future__ import annotations

import base64
import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ...data.tokenizer import Tokenizer
from .. import schema
from ..completions import (
    Choice,
    Decoding,
    Scored,
    chat_logprobs,
    completion_logprobs,
    identity,
    sse,
)
from ..errors import ApiError
from ..http import post, run_batch
from ..served import EMBED, Served

Build = Callable[[Choice, str, list[Scored]], dict[str, Any]]
"""A choice, its new text and its new tokens' log-probabilities -> its part of a response
or chunk."""


def add_routes(app: FastAPI, served: Served) -> None:
    """``POST /v1/completions``, ``/v1/chat/completions`` and ``/v1/embeddings``."""

    def decoding(path: str) -> Decoding:
        if served.decoding is None:
            raise served.needs("a language-model run", path)
        return served.decoding

    @post(app, "/v1/completions", schema.CompletionRequest)
    async def completions(body: schema.CompletionRequest, request: Request) -> Response:
        decoder = decoding("/v1/completions")
        prompts = decoder.prompts(body)
        prefixes = [decoder.tokenizer.decode(p) if body.echo else "" for p in prompts]
        max_tokens = 16 if body.max_tokens is None else body.max_tokens
        choices = decoder.choices(prompts, body, max_tokens, prefixes, body.logprobs, body.echo)
        head = {**identity("cmpl"), "object": "text_completion", "model": served.name}
        build = functools.partial(completion_choice, decoder.tokenizer)
        if body.stream:
            return streaming(decoder, choices, head, build)
        answers = await decoder.complete(choices, build, request.is_disconnected)
        usage = decoder.usage(choices, prompts)
        return JSONResponse({**head, "choices": answers, "usage": usage})

    @post(app, "/v1/chat/completions", schema.ChatRequest)
    async def chat(body: schema.ChatRequest, request: Request) -> Response:
        decoder = decoding("/v1/chat/completions")
        prompt = decoder.chat_prompt(body)
        max_tokens = body.max_completion_tokens or body.max_tokens
        if body.top_logprobs is not None and not body.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs: true", "top_logprobs")
        choices = decoder.choices([prompt], body, max_tokens, [""], body.logprob_count)
        head = {**identity("chatcmpl"), "object": "chat.completion", "model": served.name}
        if body.stream:
            chunk = {**head, "object": "chat.completion.chunk"}
            return streaming(
                decoder, choices, chunk, functools.partial(chat_delta, decoder.tokenizer)
            )
        build = functools.partial(chat_message, decoder.tokenizer)
        answers = await decoder.complete(choices, build, request.is_disconnected)
        usage = decoder.usage(choices, [prompt])
        return JSONResponse({**head, "choices": answers, "usage": usage})

    @post(app, "/v1/embeddings", schema.EmbeddingRequest)
    async def embeddings(body: schema.EmbeddingRequest, _: Request) -> Response:
        if EMBED not in served.work:
            what = "a sentence encoder's run (similarity, classification)"
            raise served.needs(what, "/v1/embeddings")
        if body.dimensions is not None:
            raise ApiError(400, "dimensions: not supported by this server", "dimensions")
        texts = [body.input] if isinstance(body.input, str) else body.input
        vectors = await run_batch(served.batched, [((EMBED,), text) for text in texts])
        data = [
            {"object": "embedding", "index": i, "embedding": encoded(v, body.encoding_format)}
            for i, v in enumerate(vectors)
        ]
        tokens = sum(len(served.task.tokenizer().encode(text)) for text in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return JSONResponse({"object": "list", "data": data, "model": served.name, "usage": usage})


def completion_choice(
    tokenizer: Tokenizer, choice: Choice, text: str, scored: list[Scored]
) -> dict[str, Any]:
    """A completion's choice, whole or as a chunk of a stream."""
    return {
        "text": text,
        "index": choice.index,
        "logprobs": completion_logprobs(tokenizer, choice, scored),
        "finish_reason": choice.finish_reason,
    }


def chat_message(
    tokenizer: Tokenizer, choice: Choice, text: str, scored: list[Scored]
) -> dict[str, Any]:
    """A chat completion's choice, whole."""
    return {
        "index": choice.index,
        "message": {"role": "assistant", "content": text},
        "logprobs": chat_logprobs(tokenizer, choice, scored),
        "finish_reason": choice.finish_reason,
    }


def chat_delta(
    tokenizer: Tokenizer, choice: Choice, text: str, scored: list[Scored]
) -> dict[str, Any]:
    """A chat completion's choice in a chunk of a stream: its new text, if any, and its new
    tokens' log-probabilities, if asked for."""
    content = {"role": "assistant", "content": text} if text else {}
    delta = {"index": choice.index, "delta": content, "finish_reason": choice.finish_reason}
    logprobs = chat_logprobs(tokenizer, choice, scored)
    return delta if logprobs is None else {**delta, "logprobs": logprobs}


def encoded(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    """An embedding as OpenAI sends it: floats, or base64 of little-endian float32."""
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def streaming(
    decoding: Decoding, choices: list[Choice], head: dict[str, Any], build: Build
) -> StreamingResponse:
    """Server-sent events, one chunk each time a choice moves on with text or ends, then
    ``[DONE]``; an error after the first chunk is sent as an event of its own. The
    requests are queued before the response starts, so that a full queue is a 429."""
    queue = decoding.submit(choices)

    async def events() -> AsyncIterator[str]:
        try:
            async for choice in decoding.progress(choices, queue):
                text = "".join(choice.pieces[-1:])
                if not choice.pieces[:-1] and choice.prefix:  # the echoed prompt, first
                    text = choice.prefix + text
                scored = choice.scored[-1] if choice.scored else []
                if text or scored or choice.finish_reason is not None:
                    yield sse({**head, "choices": [build(choice, text, scored)]})
        except ApiError as error:
            yield sse(error.body())
        yield sse("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")
