"""Preference pairs (for DPO): JSON lines of a prompt, a chosen and a rejected response.

A line is an object. Its prompt is a string (``"prompt": "..."``) or a conversation
(``"prompt": [...]`` or ``"messages": [...]``), a list of messages ``{"role", "content"}``
(``system``, ``user`` or ``assistant``) ending with the user's turn. Each response
(``"chosen"``, ``"rejected"``) is a string or, after a conversation, the assistant's message,
alone or as a list of one (TRL's datasets hold it so). Other keys are left alone; blank
lines are skipped. Every error names file and line. A conversation is kept as its messages:
rendering it into tokens is the chat template's work, not this reader's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .readers import DataError, check_message, iter_json_lines, json_kind

RESPONSES = ("chosen", "rejected")

Message = dict[str, str]
"""``{"role": ..., "content": ...}``, as chat templates take messages."""


@dataclass(frozen=True)
class PreferencePair:
    """A prompt with the response preferred to it (``chosen``) and the other (``rejected``),
    each response the text of the assistant's turn; ``line`` is its line in the file."""

    prompt: str | tuple[Message, ...]
    chosen: str
    rejected: str
    line: int

    @property
    def conversational(self) -> bool:
        """Whether the prompt is a conversation (else plain text)."""
        return not isinstance(self.prompt, str)


def iter_preferences(path: str | Path) -> Iterator[PreferencePair]:
    """The pairs of a JSON-lines file, validated line by line as they are read."""
    for number, record in iter_json_lines(path):
        try:
            yield _pair(record, number)
        except ValueError as error:
            raise DataError.at(path, number, str(error)) from None


def _pair(record: Any, number: int) -> PreferencePair:
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, found {json_kind(record)}")
    prompt = _prompt(record)
    conversation = not isinstance(prompt, str)
    chosen, rejected = (_response(record, key, conversation) for key in RESPONSES)
    return PreferencePair(prompt, chosen, rejected, number)


def _prompt(record: dict[str, Any]) -> str | tuple[Message, ...]:
    """The prompt, from ``prompt`` (a string or a conversation) or ``messages``."""
    keys = [key for key in ("prompt", "messages") if key in record]
    if len(keys) != 1:
        raise ValueError(
            "give the prompt as 'prompt' or as 'messages', not both"
            if keys
            else "missing 'prompt' (or 'messages')"
        )
    key = keys[0]
    value = record[key]
    if key == "prompt" and isinstance(value, str):
        if not value:
            raise ValueError("'prompt' is empty")
        return value
    if not isinstance(value, list):
        wanted = "a string or a list of messages" if key == "prompt" else "a list of messages"
        raise ValueError(f"'{key}' must be {wanted}, not {json_kind(value)}")
    if not value:
        raise ValueError(f"'{key}' is an empty conversation")
    messages = tuple(_message(f"'{key}'[{i}]", message) for i, message in enumerate(value))
    if messages[-1]["role"] != "user":
        raise ValueError(
            f"'{key}' ends with the {messages[-1]['role']}'s message: a response answers the user's"
        )
    return messages


def _response(record: dict[str, Any], key: str, conversation: bool) -> str:
    """The text of response ``key``: a string, or after a conversation the assistant's
    message, alone or in a list of one."""
    if key not in record:
        raise ValueError(f"missing '{key}'")
    value = record[key]
    if isinstance(value, (dict, list)) and not conversation:
        raise ValueError(f"'{key}' is a message but the prompt is a string: give it as messages")
    if isinstance(value, list):
        if len(value) != 1:
            raise ValueError(f"'{key}' must hold one message, the assistant's, not {len(value)}")
        value = value[0]
    if isinstance(value, dict):
        message = _message(f"'{key}'", value)
        if message["role"] != "assistant":
            role = message["role"]
            raise ValueError(f"'{key}' must be the assistant's message, not the {role}'s")
        value = message["content"]
    if not isinstance(value, str):
        raise ValueError(f"'{key}' must be a string or a message, not {json_kind(value)}")
    if not value:
        raise ValueError(f"'{key}' is empty")
    return value


def _message(where: str, node: Any) -> Message:
    """A message's role and content (:func:`~.readers.check_message`)."""
    check_message(where, node)
    return {"role": node["role"], "content": node["content"]}
