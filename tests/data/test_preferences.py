"""Preference pairs from JSON lines: plain and conversational prompts, responses as text or
the assistant's message, and every malformed line refused naming file and line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scratchformer.data.preferences import PreferencePair, iter_preferences
from scratchformer.data.readers import DataError

USER = {"role": "user", "content": "Name a colour."}
SYSTEM = {"role": "system", "content": "Answer briefly."}
ASSISTANT = {"role": "assistant", "content": "Blue."}


def lines(path: Path, *records: object) -> Path:
    path.write_text("".join(f"{json.dumps(r)}\n" if r != "" else "\n" for r in records))
    return path


def test_plain_and_conversational_pairs(tmp_path: Path) -> None:
    path = lines(
        tmp_path / "pairs.jsonl",
        {"prompt": "2 + 2 =", "chosen": " 4", "rejected": " 5", "id": 7},
        "",
        {"messages": [SYSTEM, USER], "chosen": ASSISTANT, "rejected": "Loud."},
        {"prompt": [USER], "chosen": [ASSISTANT], "rejected": [{**ASSISTANT, "content": "7"}]},
    )
    pairs = list(iter_preferences(path))
    assert pairs == [
        PreferencePair("2 + 2 =", " 4", " 5", 1),
        PreferencePair((SYSTEM, USER), "Blue.", "Loud.", 3),
        PreferencePair((USER,), "Blue.", "7", 4),
    ]
    assert [pair.conversational for pair in pairs] == [False, True, True]


def test_a_conversation_may_hold_earlier_turns(tmp_path: Path) -> None:
    turns = [USER, ASSISTANT, {"role": "user", "content": "Another."}]
    path = lines(tmp_path / "pairs.jsonl", {"messages": turns, "chosen": "Red.", "rejected": "No."})
    (pair,) = iter_preferences(path)
    assert pair.prompt == tuple(turns)


PLAIN = {"prompt": "Hi", "chosen": "Hello", "rejected": "Go away"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ([1, 2], "expected a JSON object, found a list"),
        ({"chosen": "a", "rejected": "b"}, "missing 'prompt' \\(or 'messages'\\)"),
        ({**PLAIN, "messages": [USER]}, "give the prompt as 'prompt' or as 'messages', not both"),
        ({**PLAIN, "prompt": 3}, "'prompt' must be a string or a list of messages, not a number"),
        ({"messages": "Hi", "chosen": "a", "rejected": "b"}, "'messages' must be a list"),
        ({**PLAIN, "prompt": []}, "'prompt' is an empty conversation"),
        ({**PLAIN, "prompt": ""}, "'prompt' is empty"),
        ({**PLAIN, "prompt": ["Hi"]}, "'prompt'\\[0\\] must be a message object, not a string"),
        ({**PLAIN, "prompt": [{"role": "user"}]}, "'prompt'\\[0\\]: 'content' is missing"),
        (
            {**PLAIN, "prompt": [{"role": "user", "content": None}]},
            "'prompt'\\[0\\]: 'content' is not a string \\(null\\)",
        ),
        (
            {**PLAIN, "prompt": [{"role": "bot", "content": "x"}]},
            "'prompt'\\[0\\]: role 'bot' is not one of system, user, assistant",
        ),
        ({**PLAIN, "prompt": [USER, ASSISTANT]}, "'prompt' ends with the assistant's message"),
        ({"prompt": "Hi", "rejected": "b"}, "missing 'chosen'"),
        ({"prompt": "Hi", "chosen": "a"}, "missing 'rejected'"),
        ({**PLAIN, "chosen": ""}, "'chosen' is empty"),
        ({**PLAIN, "rejected": 4}, "'rejected' must be a string or a message, not a number"),
        ({**PLAIN, "chosen": ASSISTANT}, "'chosen' is a message but the prompt is a string"),
        (
            {**PLAIN, "prompt": [USER], "chosen": [ASSISTANT, ASSISTANT]},
            "'chosen' must hold one message, the assistant's, not 2",
        ),
        (
            {**PLAIN, "prompt": [USER], "rejected": USER},
            "'rejected' must be the assistant's message, not the user's",
        ),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path: Path, line: object, message: str) -> None:
    path = tmp_path / "pairs.jsonl"
    bad = line if isinstance(line, str) else json.dumps(line)
    path.write_text(f"{json.dumps(PLAIN)}\n\n{bad}\n{json.dumps(PLAIN)}\n")
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}:3: {message}"):
        list(iter_preferences(path))


def test_an_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n  \n")
    with pytest.raises(DataError, match="empty file"):
        list(iter_preferences(path))
