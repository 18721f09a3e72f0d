"""Readers for plain text, parallel text, TSV, CoNLL, SQuAD JSON and chat JSONL files.

Files are UTF-8 (a leading byte-order mark is dropped), plain or gzip (``.gz``); CRLF line
endings are read as LF. Every malformed input raises :class:`DataError` with a message that
starts with ``file:line:``, so a user can open the file at the line at fault (in JSON, the
message names the key at fault instead, e.g. ``data[2].paragraphs[0].qas[5]``).
"""

from __future__ import annotations

import codecs
import gzip
import json
import math
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DataSettingsError

DOCSTART = "-DOCSTART-"
JSON_TYPES = {str: "a string", int: "an integer", list: "a list", dict: "an object"}


class DataError(ValueError):
    """Malformed data. The message starts with ``path:line: `` (``path: `` when no single
    line is at fault, e.g. an empty file)."""

    @classmethod
    def at(cls, path: str | Path, line: int | None, message: str) -> DataError:
        """The error for ``path`` at 1-based ``line`` (``None``: the whole file)."""
        where = str(path) if line is None else f"{path}:{line}"
        return cls(f"{where}: {message}")


@dataclass(frozen=True)
class LabeledText:
    """One sentence or a sentence pair with its label (a class name or a float)."""

    texts: tuple[str, ...]
    label: str | float
    line: int


@dataclass(frozen=True)
class TaggedSentence:
    """Tokens with one tag each; ``line`` is the line of the first token."""

    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class Answer:
    """An answer to a question: its text, found at character ``start`` of the context."""

    text: str
    start: int

    @property
    def end(self) -> int:
        """The character after the answer."""
        return self.start + len(self.text)


@dataclass(frozen=True)
class Question:
    """A question about a context, with its reference answers (one or more; training
    takes the first); ``key`` says where it is in the file."""

    id: str
    question: str
    context: str
    answers: tuple[Answer, ...]
    key: str


@dataclass(frozen=True)
class Conversation:
    """A chat's messages (``role`` and ``content``, and whatever else the line gave them),
    read from line ``line`` of ``path``."""

    messages: tuple[dict[str, Any], ...]
    path: str
    line: int


CHAT_ROLES = ("system", "user", "assistant")


def read_text(path: str | Path) -> str:
    """The whole file, newlines kept (CRLF becomes LF): a language-modelling corpus."""
    return "".join(iter_lines(path))


def iter_lines(path: str | Path) -> Iterator[str]:
    """The file's lines, newline kept (CRLF becomes LF), read as a stream: a corpus larger
    than memory goes through line by line. Errors name the file and line."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    has_text = False
    try:
        with opener(path, "rb") as file:
            for number, raw in enumerate(file, start=1):
                if number == 1:
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    byte = raw[err.start]
                    raise DataError.at(
                        path, number, f"not valid UTF-8 (byte 0x{byte:02x})"
                    ) from None
                has_text = has_text or not line.isspace()
                yield line[:-2] + "\n" if line.endswith("\r\n") else line
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise DataError.at(path, None, f"not a valid gzip file ({err})") from None
    if not has_text:
        raise DataError.at(path, None, "empty file")


def iter_documents(path: str | Path, per_line: bool = False) -> Iterator[str]:
    """The documents of a plain-text file, or of every file under a directory (in sorted
    order): separated by blank lines, or with ``per_line`` one a line. A document's lines
    are joined by single newlines; blank ones are skipped. Streamed, as :func:`iter_lines`."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        if not files:
            raise DataError.at(path, None, "a directory with no files")
        for file in files:
            yield from iter_documents(file, per_line)
        return
    lines: list[str] = []
    for line in iter_lines(path):
        line = line.rstrip("\n")
        if line.strip() and not per_line:
            lines.append(line)
        elif line.strip():
            yield line
        elif lines:
            yield "\n".join(lines)
            lines = []
    if lines:
        yield "\n".join(lines)


def read_lines(path: str | Path) -> list[str]:
    """One item per line, without the line ending."""
    lines = read_text(path).split("\n")
    if lines[-1] == "":  # the file ends with a newline
        lines.pop()
    return lines


def read_parallel(source_path: str | Path, target_path: str | Path) -> list[tuple[str, str]]:
    """``(source, target)`` pairs: line i of one file is the translation of line i of the other."""
    sources, targets = read_lines(source_path), read_lines(target_path)
    if len(sources) != len(targets):
        (short, n_short), (long, n_long) = sorted(
            [(source_path, len(sources)), (target_path, len(targets))], key=lambda pair: pair[1]
        )
        raise DataError.at(
            long,
            n_short + 1,
            f"no matching line in {short}, which ends at line {n_short} "
            f"({long} has {n_long} lines, {short} has {n_short})",
        )
    return list(zip(sources, targets, strict=True))


def read_tsv(
    path: str | Path,
    text_columns: str | int | Sequence[str | int],
    label_column: str | int,
    header: bool,
    labels: Sequence[str] | None = None,
    regression: bool = False,
) -> list[LabeledText]:
    """Labelled sentences (one text column) or sentence pairs (two) from a tab-separated file.

    Columns are chosen by header name (needs ``header=True``) or by 0-based index. The file
    is read literally: no CSV quoting, since sentences contain quote characters. Empty lines
    are skipped. ``labels`` restricts class labels to a set; ``regression=True`` parses the
    label as a float instead.
    """
    path = Path(path)
    columns = (text_columns,) if isinstance(text_columns, (str, int)) else tuple(text_columns)
    if not 1 <= len(columns) <= 2:
        raise DataSettingsError(f"text_columns={text_columns!r}: give one or two columns")
    if labels is not None and regression:
        raise ValueError("labels are for classification; regression=True takes float labels")
    allowed = None if labels is None else tuple(labels)
    rows = [(n, line.split("\t")) for n, line in enumerate(read_lines(path), 1) if line]
    first_line, first_fields = rows[0]
    names = first_fields if header else None
    rows = rows[1:] if header else rows
    if not rows:
        raise DataError.at(path, None, "no data rows after the header")
    width = len(first_fields)
    texts = [_column(path, first_line, c, names, width) for c in columns]
    label = _column(path, first_line, label_column, names, width)

    examples = []
    for n, fields in rows:
        if len(fields) != width:
            raise DataError.at(path, n, f"expected {width} columns, found {len(fields)}")
        value: str | float = fields[label]
        if regression:
            value = _number(path, n, fields[label])
        elif allowed is not None and value not in allowed:
            choices = ", ".join(repr(x) for x in allowed)
            raise DataError.at(path, n, f"label {value!r} is not one of {choices}")
        examples.append(LabeledText(tuple(fields[c] for c in texts), value, n))
    return examples


def read_conll(path: str | Path) -> list[TaggedSentence]:
    """Sentences from a CoNLL file: ``token tag`` a line, a blank line between sentences.

    With more than two columns the token is the first and the tag the last; ``-DOCSTART-``
    lines are skipped. Tags are not checked here: the caller knows the tag set.
    """
    path = Path(path)
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    first = 0
    for n, line in enumerate([*read_lines(path), ""], 1):  # "" closes the last sentence
        fields = re.split(r"[ \t]+", line.strip(" \t"))  # not str.split: tokens may hold U+00A0
        if fields == [""]:
            if tokens:
                sentences.append(TaggedSentence(tuple(tokens), tuple(tags), first))
                tokens, tags = [], []
        elif fields[0] == DOCSTART:
            continue
        elif len(fields) < 2:
            raise DataError.at(path, n, f"expected 'token tag', found {line!r} (no tag)")
        else:
            if not tokens:
                first = n
            tokens.append(fields[0])
            tags.append(fields[-1])
    if not sentences:
        raise DataError.at(path, None, "no sentences")
    return sentences


def read_squad(path: str | Path) -> list[Question]:
    """The questions of a SQuAD v1.1 JSON file: ``{"data": [{"paragraphs": [{"context": ...,
    "qas": [{"id", "question", "answers": [{"text", "answer_start"}, ...]}]}]}]}``.

    Every answer must be the text of its context at ``answer_start``; errors name the file
    and the key at fault."""
    path = Path(path)
    try:
        root = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise DataError.at(path, err.lineno, f"not valid JSON ({err.msg})") from None
    questions = []
    for a, article in enumerate(_field(path, "", root, "data", list)):
        paragraphs = _field(path, f"data[{a}]", article, "paragraphs", list)
        for p, paragraph in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            context = _field(path, where, paragraph, "context", str)
            for q, qa in enumerate(_field(path, where, paragraph, "qas", list)):
                key = f"{where}.qas[{q}]"
                answers = _field(path, key, qa, "answers", list)
                if not answers:
                    raise DataError.at(path, None, f"{key}.answers: no answer")
                found = tuple(
                    _answer(path, f"{key}.answers[{i}]", answer, context)
                    for i, answer in enumerate(answers)
                )
                question = _field(path, key, qa, "question", str)
                questions.append(
                    Question(
                        str(_field(path, key, qa, "id", (str, int))), question, context, found, key
                    )
                )
    if not questions:
        raise DataError.at(path, None, "no questions")
    return questions


def iter_json_lines(path: str | Path) -> Iterator[tuple[int, Any]]:
    """The number and JSON value of each line of a JSON-lines file, blank lines skipped;
    a line that is not JSON is reported with its number."""
    for number, line in enumerate(iter_lines(path), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError.at(path, number, f"not valid JSON ({err.msg})") from None
        yield number, value


def read_chat(path: str | Path) -> list[Conversation]:
    """The conversations of a JSONL file, one a line, in OpenAI's and Hugging Face's
    format: ``{"messages": [{"role": "system" | "user" | "assistant", "content": "..."},
    ...]}``, each with at least one assistant message. Blank lines are skipped."""
    conversations = []
    for number, record in iter_json_lines(path):
        messages = record.get("messages") if isinstance(record, dict) else None
        if not isinstance(messages, list) or not messages:
            raise DataError.at(path, number, 'expected {"messages": [...]}, a non-empty list')
        try:
            for i, message in enumerate(messages):
                check_message(f"messages[{i}]", message)
        except ValueError as error:
            raise DataError.at(path, number, str(error)) from None
        if not any(message["role"] == "assistant" for message in messages):
            raise DataError.at(path, number, "no assistant message: nothing to learn")
        conversations.append(Conversation(tuple(messages), str(path), number))
    if not conversations:
        raise DataError.at(path, None, "no conversations")
    return conversations


def check_message(where: str, node: Any) -> None:
    """ValueError naming ``where`` unless ``node`` is a chat message: an object whose
    ``role`` is one of :data:`CHAT_ROLES` and ``content`` a string."""
    if not isinstance(node, dict):
        raise ValueError(f"{where} must be a message object, not {json_kind(node)}")
    for field in ("role", "content"):
        if not isinstance(node.get(field), str):
            found = "missing" if field not in node else f"not a string ({json_kind(node[field])})"
            raise ValueError(f"{where}: '{field}' is {found}")
    if node["role"] not in CHAT_ROLES:
        raise ValueError(f"{where}: role {node['role']!r} is not one of {', '.join(CHAT_ROLES)}")


def json_kind(value: Any) -> str:
    """What a JSON value is, for an error message."""
    kinds = {str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    kinds.update({list: "a list", dict: "an object", type(None): "null"})
    return kinds[type(value)]


def _field(path: Path, where: str, node: Any, name: str, kind: type | tuple[type, ...]) -> Any:
    """``node[name]``, which must be of ``kind``; errors name the key."""
    key = f"{where}.{name}" if where else name
    if not isinstance(node, dict):
        raise DataError.at(path, None, f"{where or 'the top level'}: expected an object")
    if name not in node:
        raise DataError.at(path, None, f"{key}: missing")
    value = node[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wanted = " or ".join(JSON_TYPES[k] for k in kinds)
        raise DataError.at(path, None, f"{key}: expected {wanted}, found {value!r}")
    return value


def _answer(path: Path, key: str, node: Any, context: str) -> Answer:
    """An answer whose text is the context's at its ``answer_start``."""
    text = _field(path, key, node, "text", str)
    start = _field(path, key, node, "answer_start", int)
    if not text:
        raise DataError.at(path, None, f"{key}.text: empty")
    found = context[start : start + len(text)] if start >= 0 else ""
    if found != text:
        raise DataError.at(
            path,
            None,
            f"{key}: answer_start={start} does not match its text {text!r} "
            f"(the context reads {found!r} there)",
        )
    return Answer(text, start)


def _column(path: Path, line: int, column: str | int, names: list[str] | None, width: int) -> int:
    """The 0-based index of ``column`` (a header name or an index) in rows of ``width``."""
    if isinstance(column, str):
        if names is None:
            raise DataSettingsError(f"column {column!r} is chosen by name, which needs header=True")
        if column not in names:
            raise DataError.at(path, line, f"no column {column!r}; the header has {names}")
        return names.index(column)
    if not 0 <= column < width:
        raise DataError.at(path, line, f"column {column} is out of range: there are {width}")
    return column


def _number(path: Path, line: int, text: str) -> float:
    """A regression target: a finite float."""
    try:
        value = float(text)
    except ValueError:
        raise DataError.at(path, line, f"label {text!r} is not a number") from None
    if not math.isfinite(value):
        raise DataError.at(path, line, f"label {text!r} is not a finite number")
    return value
