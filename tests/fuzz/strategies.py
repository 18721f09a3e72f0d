"""What the fuzz tests hand the project: values of every type and shape, the documents
that hold them (TOML, JSON), and the property every input must meet."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import torch
from hypothesis import strategies as st

from scratchformer.cli import main

SCALE = int(os.environ.get("SCRATCHFORMER_FUZZ_SCALE", "1"))
"""How many times its default number of examples each fuzz test runs (a longer run: 10)."""


def examples(count: int) -> int:
    """``count`` examples, times :data:`SCALE`."""
    return count * SCALE


SCALARS = (
    st.integers()
    | st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, -(2**63), 10**12])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
    | st.text(max_size=12)
)
"""Numbers huge, negative and not finite, booleans, text of any characters."""


SHORT_TEXT = st.text(max_size=8)


def values(keys: st.SearchStrategy[str] = SHORT_TEXT) -> st.SearchStrategy[Any]:
    """Scalars, and lists and tables of them nested up to two levels."""

    def nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3)

    return SCALARS | nested(SCALARS) | nested(SCALARS | nested(SCALARS))


def key_text(key: str) -> str:
    """``key`` as a quoted TOML key."""
    return json.dumps(key, ensure_ascii=False)


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (tables inline)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (int, float, str)):
        return json.dumps(value, ensure_ascii=False)  # (a JSON string or number is TOML)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{key_text(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(document: dict[str, Any]) -> str:
    """``document`` as TOML: its scalars first, then each table as a ``[section]``."""
    lines = [
        f"{key_text(k)} = {toml_value(v)}" for k, v in document.items() if not isinstance(v, dict)
    ]
    for key, table in document.items():
        if isinstance(table, dict):
            lines.append(f"[{key_text(key)}]")
            lines += [f"{key_text(k)} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def assert_one_line_naming(error: Exception, *names: str) -> None:
    """A refusal the CLI can print as it is: one line, naming what was at fault."""
    message = str(error)
    assert message and "\n" not in message, message
    assert any(name in message for name in names), f"{message!r} names none of {names}"


def paths(document: Any, depth: int, where: tuple = ()) -> Iterator[tuple]:
    """The path (keys and indexes) to every value in a parsed JSON ``document``, down to
    ``depth`` levels."""
    yield where
    if isinstance(document, (dict, list)) and len(where) < depth:
        items = document.items() if isinstance(document, dict) else enumerate(document)
        for key, value in items:
            yield from paths(value, depth, (*where, key))


@st.composite
def mutated(draw: st.DrawFn, document: Any, changes: int = 3, depth: int = 4) -> Any:
    """``document`` (parsed JSON) with up to ``changes`` of its values (``depth`` levels
    down at most) replaced by anything of any type, or removed."""
    document = copy.deepcopy(document)
    for _ in range(draw(st.integers(1, changes))):
        path = draw(st.sampled_from(list(paths(document, depth))))
        if not path:
            return draw(values())
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(values())
    return document


def cli(*args: str, stdin: str | bytes = "") -> tuple[int, str, str]:
    """``scratchformer --quiet ARGS`` run here: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), standard_input(stdin):
        status = main(["--quiet", *args])
    if status == 1 and "internal error" in err.getvalue():  # again, for its traceback
        with standard_input(stdin):
            main(["--quiet", "--debug", *args])
    return status, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def standard_input(text: str | bytes) -> Iterator[None]:
    before = sys.stdin
    data = text.encode("utf-8") if isinstance(text, str) else text
    sys.stdin = io.TextIOWrapper(io.BytesIO(data))
    try:
        yield
    finally:
        sys.stdin = before


def assert_sound_or_refused(status: int, err: str, *names: str) -> None:
    """A command's outcome: done (exit 0), or refused (exit 2) in one line naming one of
    ``names``; never a traceback, never an internal error (exit 1)."""
    assert status in (0, 2), err
    if status == 2:
        lines = [line for line in err.splitlines() if not line.startswith("scratchformer: warning")]
        assert len(lines) == 1 and re.match(r"scratchformer( [\w-]+)?: error: ", lines[0]), err
        assert any(name in lines[0] for name in names), f"{lines[0]!r} names none of {names}"


DTYPES = st.sampled_from([torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.bool])


@st.composite
def damaged_tensors(draw: st.DrawFn, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` with a few of them reshaped, retyped, emptied or dropped, or one added."""
    tensors = dict(tensors)
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(tensors)))
        change = draw(st.sampled_from(["shape", "dtype", "empty", "drop", "extra", "scalar"]))
        if change == "shape":
            tensors[name] = torch.zeros(
                *[draw(st.integers(1, 5)) for _ in range(draw(st.integers(1, 3)))]
            )
        elif change == "dtype":
            tensors[name] = tensors[name].to(draw(DTYPES))
        elif change == "empty":
            tensors[name] = torch.zeros(0)
        elif change == "drop" and len(tensors) > 1:
            del tensors[name]
        elif change == "extra":
            tensors[draw(st.text(min_size=1, max_size=12))] = torch.zeros(2)
        else:
            tensors[name] = torch.tensor(draw(st.floats(allow_nan=True, allow_infinity=True)))
    return tensors
