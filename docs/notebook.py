"""A Markdown page of docs/ as a Jupyter notebook (docs/guide.ipynb, from docs/guide.md),
written by ``python docs/build.py``: the page's runnable Python blocks become code cells,
in order; everything else (prose, quoted source, blocks marked no-run, other languages)
becomes Markdown cells, code shown as code. The notebook is made from the page each time,
so it holds no outputs, and its cell ids come from the cells' text: a rebuild of the same
page gives the same bytes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import nbformat
from nbformat.notebooknode import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

COMMENT = re.compile(r"^<!--.*-->\n?", re.MULTILINE)
"""A line that is one HTML comment: the build's markers, which a notebook has no use for."""
METADATA = "scratchformer"
"""The code cells' metadata key: ``{"line": N}``, the page's line of the cell's first line."""
SETUP = """\
import sys
from pathlib import Path

# Jupyter runs a notebook in its own directory, docs/; the snippets import docs.figures,
# so the repository's root (the directory that holds docs/figures.py) goes on sys.path.
for directory in (Path.cwd(), *Path.cwd().parents):
    if (directory / "docs" / "figures.py").is_file():
        sys.path.insert(0, str(directory))
        break
"""
"""The first code cell, which the page has not: it makes ``docs.figures`` importable."""


class CodeBlock(Protocol):
    """A fenced code block of the page, as docs/build.py's ``blocks()`` finds it."""

    language: str
    code: str
    line: int
    runs: bool


def preface(page: str) -> str:
    """The first Markdown cell: where the notebook comes from, and what its first cell does."""
    return (
        f"*This notebook is made from [{page}]({page}) by `python docs/build.py` (or `make "
        "docs`): edit the page, not the notebook. Jupyter runs it in `docs/`; the next cell "
        "puts the repository's root on `sys.path`, so that the snippets can import "
        "`docs.figures`.*"
    )


def cell_id(kind: str, source: str, taken: set[str]) -> str:
    """A short id from a cell's kind and text, unique in the notebook (a repeat of the same
    text is numbered): the same page gives the same ids, and an edit of the page changes
    only the ids of the cells it touches."""
    base = hashlib.sha1(f"{kind}\n{source}".encode()).hexdigest()[:12]
    name, repeat = base, 1
    while name in taken:
        repeat += 1
        name = f"{base}-{repeat}"
    taken.add(name)
    return name


def markdown_cell(lines: Sequence[str], taken: set[str]) -> NotebookNode | None:
    """A Markdown cell of ``lines`` (the build's comment lines left out), or None if blank."""
    text = COMMENT.sub("", "".join(lines)).strip("\n")
    if not text.strip():
        return None
    return new_markdown_cell(text, id=cell_id("markdown", text, taken))


def notebook(path: Path, text: str, blocks: Sequence[CodeBlock]) -> str:
    """The notebook of the page at ``path`` whose text is ``text`` and fenced blocks are
    ``blocks``, as the text of an ``.ipynb`` file (nbformat 4.5, no outputs)."""
    lines = text.splitlines(keepends=True)
    taken: set[str] = set()
    cells = [
        new_markdown_cell(preface(path.name), id="preface"),
        new_code_cell(SETUP.rstrip("\n"), id="setup"),
    ]
    start = 0  # the index of the first line not yet in a cell
    for block in blocks:
        if block.language != "python" or not block.runs:
            continue
        fence = block.line - 2  # the index of the opening fence
        prose = markdown_cell(lines[start:fence], taken)
        if prose is not None:
            cells.append(prose)
        code = block.code.rstrip("\n")
        cells.append(
            new_code_cell(
                code, id=cell_id("code", code, taken), metadata={METADATA: {"line": block.line}}
            )
        )
        end = fence + block.code.count("\n") + 1  # the index of the closing fence
        assert lines[end].startswith("```"), f"{path.name}:{end + 1}: not the block's end"
        start = end + 1
    prose = markdown_cell(lines[start:], taken)
    if prose is not None:
        cells.append(prose)
    book = new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
    )
    nbformat.validate(book)
    return nbformat.writes(book) + "\n"
