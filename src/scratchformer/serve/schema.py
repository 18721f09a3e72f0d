"""The bodies the server accepts, field by field as OpenAI's API reference names them
where an endpoint is OpenAI's (completions, chat completions, embeddings), and in the same
style for the task endpoints. Fields that OpenAI defines and this server cannot honour are
refused by name (:func:`refuse_unsupported`) rather than ignored; fields it does not know
are ignored, as OpenAI's clients send some that only some servers read."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Text = Annotated[str, Field(max_length=200_000)]


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    """Any name is taken: a server serves one run (``GET /v1/models`` names it)."""


class Sampled(Body):
    """The fields that decoding shares between completions and chat completions."""

    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: Any = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None

    @field_validator("stop")
    @classmethod
    def at_most_four_stops(cls, stop: str | list[str] | None) -> list[str]:
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if len(stops) > 4 or not all(stops):
            raise ValueError("stop takes up to 4 non-empty strings")
        return stops

    def unsupported(self) -> list[str]:
        """The fields set to what this server cannot do."""
        fields = {
            "logprobs": self.logprobs not in (None, False, 0),
            "presence_penalty": self.presence_penalty != 0,
            "frequency_penalty": self.frequency_penalty != 0,
            "logit_bias": bool(self.logit_bias),
        }
        return [name for name, set_ in fields.items() if set_]


class CompletionRequest(Sampled):
    prompt: Text | list[Text] | list[int] | list[list[int]]
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None

    def unsupported(self) -> list[str]:
        extra = {"best_of": self.best_of not in (None, 1), "suffix": bool(self.suffix)}
        return super().unsupported() + [name for name, set_ in extra.items() if set_]


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls, ...: the template's to read

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: Text | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The content as one string: the text parts of a list of parts, joined."""
        if isinstance(self.content, list):
            if any(part.get("type") != "text" for part in self.content):
                raise ValueError("only text parts are understood in message content")
            return "".join(str(part.get("text", "")) for part in self.content)
        return self.content or ""


class ChatRequest(Sampled):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)


class EmbeddingRequest(Body):
    input: Text | list[Text] = Field(min_length=1)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None


class TaskRequest(Body):
    """The inputs of a task endpoint: texts as the CLI reads its lines."""

    input: Text | list[Text] = Field(min_length=1)

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else self.input


class Question(BaseModel):
    question: Text
    context: Text


class AnswerRequest(Body):
    input: Question | list[Question] = Field(min_length=1)

    def questions(self) -> list[Question]:
        return [self.input] if isinstance(self.input, Question) else self.input


class TranslateRequest(TaskRequest):
    beam_size: int = Field(5, ge=1, le=16)
    length_penalty: float = Field(0.6, ge=0)


class FillMaskRequest(TaskRequest):
    top_k: int = Field(5, ge=1, le=100)


class AttentionRequest(Body):
    """A text to show the attention on, as the CLI's ``attention`` command takes it: for a
    translation run, ``target`` is the output its decoder reads (its own greedy
    translation when none is given)."""

    input: Text = Field(min_length=1)
    target: Text | None = None
