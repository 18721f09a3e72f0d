"""Chats rendered by a chat template into the text a language model reads, and which of
its tokens are the assistant's: the one place that renders templates, for chat
fine-tuning (``tasks/sft.py``, ``tasks/dpo.py``) and the server's chat completions alike.

Templates are Jinja, rendered as ``transformers``' ``apply_chat_template`` renders them: a
sandboxed environment, ``trim_blocks`` and ``lstrip_blocks``, ``raise_exception``,
``strftime_now``, loop controls, its ``tojson``, the special tokens by role
(``eos_token``, ``bos_token``, ...) and ``add_generation_prompt``. The rendered text is
encoded with the special tokens' strings read as those tokens, as ``transformers`` reads
it.

The assistant's tokens are found by rendering alone, for any template: the conversation up
to an assistant message with the generation prompt, and up to and with that message; the
text the second adds to what the two share, less trailing whitespace, is the assistant's
turn (its end-of-turn token included). ``{% generation %}`` marks, which some templates
carry for ``transformers``' ``return_assistant_tokens_mask``, are accepted and rendered as
their contents.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, ClassVar, NoReturn

from jinja2 import Template, TemplateError, nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .tokenizer import Tokenizer

Message = Mapping[str, Any]
"""A chat message: ``role``, ``content`` and whatever else the template reads."""

DEFAULT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""The chat template of runs whose model brings none: ChatML's layout
(``<|im_start|>role\\n...``), each turn ended by the tokenizer's eos token in place of
ChatML's ``<|im_end|>``, so that a model fine-tuned on it needs no new tokens (LoRA trains
no embeddings) and decoding stops where the assistant's turn ends."""


class GenerationMarks(Extension):
    """``{% generation %}...{% endgeneration %}``, ``transformers``' marks of the
    assistant's text, rendered as their contents."""

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser: Parser) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def raise_exception(message: str) -> NoReturn:
    """A template's way to refuse what it is given."""
    raise TemplateError(message)


def tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, **options: Any
) -> str:
    """JSON as ``transformers``' templates get it: not HTML-escaped, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **options)


@lru_cache(maxsize=16)
def compiled(template: str) -> Template:
    """``template`` compiled in the sandboxed environment (a ``TemplateError`` if it is no
    template); the last few are kept."""
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationMarks, loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return environment.from_string(template)


def special_tokens(tokenizer: Tokenizer) -> dict[str, str]:
    """The tokenizer's special tokens as a template reads them: ``eos_token``, ..."""
    return {f"{role}_token": token for role, token in tokenizer.special_tokens.items()}


def render(
    template: str,
    messages: Sequence[Message],
    tokenizer: Tokenizer,
    add_generation_prompt: bool = False,
) -> str:
    """``messages`` rendered by ``template``; ``add_generation_prompt``: followed by what
    opens the assistant's turn. A template that refuses them raises ``TemplateError``."""
    return compiled(template).render(
        messages=list(messages),
        add_generation_prompt=add_generation_prompt,
        **special_tokens(tokenizer),
    )


def prompt_ids(template: str, messages: Sequence[Message], tokenizer: Tokenizer) -> list[int]:
    """The token ids of ``messages`` rendered with the generation prompt: what a model
    continues with the assistant's answer."""
    return tokenizer.encode_rendered(render(template, messages, tokenizer, True))[0]


def assistant_spans(
    template: str, messages: Sequence[Message], tokenizer: Tokenizer, final_only: bool = False
) -> tuple[str, list[tuple[int, int]]]:
    """The whole conversation rendered, and the characters ``(start, end)`` of each
    assistant turn in it; ``final_only``: of the last message's turn only (a response after
    the history it answers). A template that renders a conversation's beginning otherwise
    than the whole conversation begins (one that rewrites earlier turns) raises
    ``ValueError``."""
    text = render(template, messages, tokenizer)
    spans = []
    first = len(messages) - 1 if final_only else 0
    for i, message in enumerate(messages[first:], first):
        if message["role"] != "assistant":
            continue
        prompt = render(template, messages[:i], tokenizer, add_generation_prompt=True)
        turn = render(template, messages[: i + 1], tokenizer)
        if not text.startswith(turn):
            raise ValueError(
                f"the chat template renders the conversation up to message {i + 1} otherwise "
                "than the whole conversation begins, so its assistant turns cannot be found"
            )
        start = shared_length(prompt, turn)
        end = len(turn.rstrip())
        if end > start:
            spans.append((start, end))
    return text, spans


def shared_length(a: str, b: str) -> int:
    """The length of the longest text that both ``a`` and ``b`` begin with."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def encode_chat(
    template: str, messages: Sequence[Message], tokenizer: Tokenizer, final_only: bool = False
) -> tuple[list[int], list[bool]]:
    """The token ids of the rendered conversation and, for each, whether it is the
    assistant's: a token that overlaps an assistant turn's characters (as
    ``transformers`` marks the tokens of its ``{% generation %}`` spans); ``final_only``:
    the last message's turn's only."""
    text, spans = assistant_spans(template, messages, tokenizer, final_only)
    ids, offsets = tokenizer.encode_rendered(text)
    mask = [
        any(token_start < end and token_end > start for start, end in spans)
        for token_start, token_end in offsets
    ]
    return ids, mask
