"""The documentation's examples run as written, its recipes are valid, its links lead
somewhere, and its generated parts are current.

Every fenced ``python`` and ``bash`` block of README.md and docs/*.md runs, in the order of
its file, in a temporary directory of that file (``recipes/`` reachable there): the Python
blocks of a file share one namespace; a bash block runs as one script (``set -euo
pipefail``) with ``scratchformer`` and ``python`` being this interpreter's, and
``$SCRATCHFORMER_DATA`` as the tests have it. A block that
cannot run here is preceded by ``<!-- no-run: why -->``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from scratchformer.config import Recipe, tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_LIMIT = 12_000
"""Bytes: the README says what the project is and how to start; the rest is in docs/."""
FENCE = re.compile(r"^```(\w*)\s*$")
NO_RUN = re.compile(r"^<!-- no-run: (.+) -->$")
GENERATED = re.compile(r"^<!-- (/?)generated")
"""Code quoted by docs/build.py between these markers is the source, not an example."""


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int
    """1-based line of the first line of code in its file."""
    runs: bool


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, but those of generated regions."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, start, language, quoted = [], None, "", False
    for number, line in enumerate(lines, 1):
        generated = GENERATED.match(line)
        if generated is not None and start is None:
            quoted = generated.group(1) == ""
        fence = FENCE.match(line)
        if fence is None or quoted:
            continue
        if start is None:
            start, language = number, fence.group(1)
            continue
        before = lines[start - 2] if start >= 2 else ""
        code = "\n".join(lines[start : number - 1]) + "\n"
        found.append(Block(language, code, start + 1, NO_RUN.match(before) is None))
        start = None
    assert start is None, f"{path}:{start}: unclosed code block"
    return found


def command_directory(tmp_path: Path) -> Path:
    """A directory for PATH whose ``scratchformer`` and ``python`` are this interpreter's,
    so that the examples run the code under test."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, run in (("scratchformer", "-m scratchformer"), ("python", "")):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" {run} "$@"\n')
        script.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "recipes").symlink_to(ROOT / "recipes")
    monkeypatch.chdir(work)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    env = {
        **os.environ,
        "PATH": f"{command_directory(tmp_path)}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",  # tiny models: one thread is fastest (see conftest.py)
        "MPLBACKEND": "Agg",
    }
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for block in blocks(path):
        if not block.runs:
            continue
        if block.language == "python":
            exec(compile("\n" * (block.line - 1) + block.code, str(path), "exec"), namespace)
        elif block.language == "bash":
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block.code],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, (
                f"{path.name}:{block.line}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
            )


def test_every_document_has_its_examples_marked() -> None:
    """Python and bash blocks run unless marked; a mark says why; other blocks are data."""
    for path in DOCUMENTS:
        for block in blocks(path):
            assert block.language in ("python", "bash", "text", "toml"), (
                f"{path.name}:{block.line}: a code block needs a language (python and bash "
                "blocks run; text and toml blocks do not)"
            )


def test_recipes_in_the_docs_are_valid() -> None:
    """Every ``toml`` block that names a task is a recipe that loads."""
    for path in DOCUMENTS:
        for block in blocks(path):
            if block.language == "toml" and "task =" in block.code:
                try:
                    Recipe.from_dict(tomllib.loads(block.code))
                except ValueError as error:
                    pytest.fail(f"{path.name}:{block.line}: {error}")


def anchors(path: Path) -> set[str]:
    """The anchors a code host gives the headings of a Markdown file."""
    headings = re.findall(r"^#+ (.+)$", path.read_text("utf-8"), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_links_lead_to_files_and_headings() -> None:
    for path in DOCUMENTS:
        text = re.sub(r"```.*?```", "", path.read_text("utf-8"), flags=re.DOTALL)
        text = re.sub(r"`[^`]*`", "", text)  # code, not links
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)]*))?\)", text):
            if "://" in target:
                continue
            linked = path.parent / target if target else path
            assert linked.exists(), f"{path.name}: broken link {target}"
            if anchor:
                assert anchor in anchors(linked), f"{path.name}: no heading for {target}#{anchor}"


def test_readme_is_short() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md has {size} bytes; move detail to docs/"


def test_generated_docs_are_current() -> None:
    spec = importlib.util.spec_from_file_location("docs_build", ROOT / "docs" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    stale = [str(path.relative_to(ROOT)) for path in build.stale()]
    assert not stale, f"{', '.join(stale)}: stale; run `python docs/build.py` (or `make docs`)"
