"""The bodies the server accepts, field by field as OpenAI's API reference names them
where an endpoint is OpenAI's (completions, chat completions, embeddings), and in the same
style for the task endpoints. Fields that OpenAI defines and this server cannot honour are
refused by name (:func:`refuse_unsupported`) rather than ignored; fields it does not know
are ignored, as OpenAI's clients send some that only some servers read."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from ..inference.grammar import Grammar
from ..predictions import Option, Prediction

Text = Annotated[str, Field(max_length=200_000)]
NonEmptyText = Annotated[str, Field(min_length=1, max_length=200_000)]
TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


def only(*values: Any) -> Any:
    """A field of OpenAI's that this server takes at ``values`` only, as its JSON schema
    says; other values are refused by name (``unsupported()``)."""
    return Field(values[0], json_schema_extra={"enum": list(values)})


class Body(BaseModel):
    """A request body. Strict: JSON's ``false`` is no integer and ``1`` no boolean, as the
    published schema says."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None
    """Any name is taken: a server serves one run (``GET /v1/models`` names it)."""


class JsonSchema(BaseModel):
    """OpenAI's ``response_format.json_schema``: the schema the answer must follow.
    ``strict`` is taken and changes nothing: the schema is always followed exactly."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)

    name: str = Field(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """OpenAI's ``response_format``: free text, any JSON object, or JSON following a
    schema."""

    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchema | None = None

    @model_validator(mode="after")
    def schema_given(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema goes with type 'json_schema', and only with it")
        return self


GRAMMAR_PARAMS = {
    "json_schema": "response_format",
    "json_object": "response_format",
    "regex": "guided_regex",
    "choice": "guided_choice",
}
"""The request field that names each kind of grammar."""


class Sampled(Body):
    """The fields that decoding shares between completions and chat completions.

    Structured output: ``response_format`` as OpenAI defines it, or vLLM's ``guided_regex``
    (the whole text matches it) or ``guided_choice`` (the text is one of them); at most one.
    """

    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    stop: NonEmptyText | Annotated[list[NonEmptyText], Field(max_length=4)] | None = None
    seed: int | None = None
    presence_penalty: float = only(0.0)
    frequency_penalty: float = only(0.0)
    logit_bias: dict[str, float] | None = only(None, {})
    response_format: ResponseFormat | None = None
    guided_regex: str | None = Field(None, min_length=1)
    guided_choice: list[Annotated[str, Field(min_length=1)]] | None = Field(None, min_length=1)

    @field_validator("guided_regex", "guided_choice")
    @classmethod
    def one_grammar(cls, value: Any, info: ValidationInfo) -> Any:
        """At most one field says what the text must be (fields are read in order)."""
        response_format = info.data.get("response_format")
        earlier = info.data.get("guided_regex") is not None or (
            response_format is not None and response_format.type != "text"
        )
        if value is not None and earlier:
            raise ValueError("give only one of response_format, guided_regex, guided_choice")
        return value

    def grammar(self) -> Grammar | None:
        """What the text must follow, or None for free text."""
        if self.guided_regex is not None:
            return Grammar("regex", self.guided_regex)
        if self.guided_choice is not None:
            return Grammar("choice", list(self.guided_choice))
        found = self.response_format
        if found is None or found.type == "text":
            return None
        if found.type == "json_object":
            return Grammar("json_object")
        return Grammar("json_schema", found.json_schema.schema_)

    @field_validator("stop")
    @classmethod
    def stops(cls, stop: str | list[str] | None) -> list[str]:
        """The stop strings as a list (OpenAI takes one string, or up to four)."""
        return [stop] if isinstance(stop, str) else list(stop or [])

    def unsupported(self) -> list[str]:
        """The fields set to what this server cannot do."""
        fields = {
            "presence_penalty": self.presence_penalty != 0,
            "frequency_penalty": self.frequency_penalty != 0,
            "logit_bias": bool(self.logit_bias),
        }
        return [name for name, set_ in fields.items() if set_]


class CompletionRequest(Sampled):
    prompt: (
        NonEmptyText
        | Annotated[list[NonEmptyText], Field(min_length=1)]
        | TokenIds
        | Annotated[list[TokenIds], Field(min_length=1)]
    )
    max_tokens: int | None = Field(None, ge=0)
    """0, with ``echo`` and ``logprobs``: the prompt scored, nothing generated."""
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=5)
    """The log-probability of each token, and of the ``logprobs`` likeliest at its place
    (of the prompt's tokens too, with ``echo``)."""
    best_of: int | None = only(None, 1)
    suffix: str | None = only(None, "")

    def unsupported(self) -> list[str]:
        extra = {"best_of": self.best_of not in (None, 1), "suffix": bool(self.suffix)}
        return super().unsupported() + [name for name, set_ in extra.items() if set_]


class Message(BaseModel):
    # name, tool_calls, ...: the template's to read
    model_config = ConfigDict(extra="allow", strict=True)

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
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    @property
    def logprob_count(self) -> int | None:
        """How many of the likeliest tokens to give at each place; None: no logprobs."""
        return (self.top_logprobs or 0) if self.logprobs else None


class EmbeddingRequest(Body):
    input: Text | list[Text] = Field(min_length=1)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = only(None)


def task_body(prediction: Prediction) -> type[Body]:
    """The body of a prediction's endpoint: ``input``, one input or a list of them (a text
    as the command line reads a line, or an object of the prediction's fields), and the
    prediction's options, each bounded as declared (and by its limit for a request)."""
    item: Any = NonEmptyText
    fields = prediction.reads.fields
    if fields:
        item = create_model(fields[0].title(), **{f: (Text, ...) for f in fields})
    body: dict[str, Any] = {"input": (item | Annotated[list[item], Field(min_length=1)], ...)}
    for option in prediction.options:
        if option.served:
            kind = option.type if option.default is not None else option.type | None
            body[option.name] = (kind, Field(option.default, **bounds(option)))
    return create_model(f"{prediction.command.title()}Request", __base__=Body, **body)


def bounds(option: Option) -> dict[str, float]:
    """Pydantic's bounds of an option's values in a request."""
    found = {} if option.most is None else {"le": option.most}
    if option.low is not None:
        found["gt" if option.above else "ge"] = option.low
    return found


class AttentionRequest(Body):
    """A text to show the attention on, as the CLI's ``attention`` command takes it: for a
    translation run, ``target`` is the output its decoder reads (its own greedy
    translation when none is given)."""

    input: Text = Field(min_length=1)
    target: Text | None = None
