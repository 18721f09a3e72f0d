"""The answers the server sends, as pydantic models: what ``/openapi.json`` documents for
each endpoint's success. The routes write their answers as plain dicts (a model's
validation would cost every request); these models describe them, and the schema fuzz
(tests/serve/test_openapi_fuzz.py) checks every answer against them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

FinishReason = Literal["stop", "length"] | None
"""Why a choice ended: an eos token or a stop string, or ``max_tokens``; None while a
streamed choice goes on."""


class Usage(BaseModel):
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    total_tokens: int = Field(ge=0)


class Answer(BaseModel):
    """What every completion answer begins with."""

    id: str
    created: int
    model: str


class CompletionLogprobs(BaseModel):
    """A choice's tokens (each decoded alone), their log-probabilities, the likeliest
    tokens at each place, and where each token's text begins in the choice's; None for a
    prompt's first token, which nothing predicts."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    text: str
    index: int = Field(ge=0)
    logprobs: CompletionLogprobs | None
    """With ``logprobs`` asked for only."""
    finish_reason: FinishReason


class CompletionChunk(Answer):
    """An event of a streamed ``POST /v1/completions``: a choice's new text."""

    object: Literal["text_completion"]
    choices: list[CompletionChoice]


class Completion(CompletionChunk):
    """``POST /v1/completions``, whole (``stream: false``)."""

    usage: Usage


class ChatMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class TokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class ChatTokenLogprob(TokenLogprob):
    top_logprobs: list[TokenLogprob]


class ChatLogprobs(BaseModel):
    """A chat choice's tokens with their log-probabilities (``logprobs: true``)."""

    content: list[ChatTokenLogprob]
    refusal: None


class ChatChoice(BaseModel):
    index: int = Field(ge=0)
    message: ChatMessage
    logprobs: ChatLogprobs | None
    finish_reason: FinishReason


class ChatCompletion(Answer):
    """``POST /v1/chat/completions``, whole (``stream: false``)."""

    object: Literal["chat.completion"]
    choices: list[ChatChoice]
    usage: Usage


class ChatDelta(BaseModel):
    """A choice's new text; empty when it has none (its last chunk)."""

    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int = Field(ge=0)
    delta: ChatDelta
    finish_reason: FinishReason
    logprobs: ChatLogprobs | None = None
    """The new tokens', with ``logprobs: true`` only."""


class ChatChunk(Answer):
    """An event of a streamed ``POST /v1/chat/completions``."""

    object: Literal["chat.completion.chunk"]
    choices: list[ChatChunkChoice]


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int = Field(ge=0)
    embedding: list[float] | str
    """Floats, or base64 of little-endian float32 (``encoding_format: base64``)."""


class EmbeddingUsage(BaseModel):
    prompt_tokens: int = Field(ge=0)
    total_tokens: int = Field(ge=0)


class Embeddings(BaseModel):
    """``POST /v1/embeddings``: a vector an input, in the inputs' order."""

    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class Output(BaseModel, extra="allow"):
    """One input's output: its index among the inputs, and the fields of the record that
    the task's command prints a line of (a classifier's ``label`` and ``probability``,
    a tagger's ``tokens`` and ``tags``, ...)."""

    index: int = Field(ge=0)


class Outputs(BaseModel):
    """A task endpoint's answer: an output an input, in the inputs' order."""

    object: Literal["list"]
    model: str
    data: list[Output]


class Attention(BaseModel):
    """``POST /v1/attention``: the attention viewer's page on the body's text."""

    object: Literal["attention"]
    model: str
    html: str


ANSWERS: dict[str, type[BaseModel]] = {
    "/v1/completions": Completion,
    "/v1/chat/completions": ChatCompletion,
    "/v1/embeddings": Embeddings,
    "/v1/attention": Attention,
}
"""The answer of each POST endpoint that is not a task's (whose answer is :class:`Outputs`)."""


STREAMS: dict[str, type[BaseModel]] = {
    "/v1/completions": CompletionChunk,
    "/v1/chat/completions": ChatChunk,
}
"""The event of each POST endpoint that streams its answer under ``stream: true`` (as
server-sent events, ``data: <json>``, then ``data: [DONE]``)."""


def answer_of(path: str) -> type[BaseModel]:
    """The model of ``POST path``'s answer."""
    return ANSWERS.get(path, Outputs)


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    """``GET /v1/models``: the one run the server serves."""

    object: Literal["list"]
    data: list[ModelCard] = Field(min_length=1, max_length=1)


class Health(BaseModel):
    """``GET /health``: up; for a language model, the requests decoding and waiting."""

    status: Literal["ok"]
    model: str
    task: str
    running: int | None = Field(None, ge=0)
    waiting: int | None = Field(None, ge=0)
