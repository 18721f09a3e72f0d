"""The documentation's examples run as written, its recipes are valid, its links lead
somewhere, and its generated parts and pictures are current.

Every fenced ``python`` and ``bash`` block of README.md and docs/*.md runs, in the order of
its file, in a temporary directory of that file (``recipes/`` reachable there): the Python
blocks of a file share one namespace; a bash block runs as one script (``set -euo
pipefail``) with ``scratchformer`` and ``python`` being this interpreter's, and
``$SCRATCHFORMER_DATA`` as the tests have it. A block that cannot run here is preceded by
``<!-- no-run: why -->``; one that trains for minutes, by ``<!-- shortened: OPTIONS -->``,
and runs with OPTIONS given to its ``scratchformer train`` commands. The Python blocks of
a page that has a notebook (docs/guide.md's docs/guide.ipynb, made from it by docs/build.py)
run as that notebook, in a Jupyter kernel. The pictures that the Python blocks save into
``$SCRATCHFORMER_PICTURES`` are those of ``docs/pictures/``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from scratchformer.config import Recipe, tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_LIMIT = 12_000
"""Bytes: the README says what the project is and how to start; the rest is in docs/."""
PERFORMANCE_LIMIT = 40_000
"""Bytes: docs/performance.md tells what to pick and how fast; its history is lab-notes.md."""
ISSUE = re.compile(r"\bissue'?s?\b", re.IGNORECASE)
"""The documents speak of the project, not of a tracker's issues."""


def load_build() -> ModuleType:
    """docs/build.py, which parses the documents' code blocks and draws the pictures."""
    spec = importlib.util.spec_from_file_location("docs_build", ROOT / "docs" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for its dataclass
    spec.loader.exec_module(module)
    return module


build = load_build()
blocks = build.blocks


def assert_pictures_drawn(path: Path, drawn: Path) -> None:
    """The pictures that document ``path`` shows from docs/pictures/ are those its snippets
    drew into ``drawn`` (but the ones docs/figures.py draws), and are current."""
    shown = re.findall(r"\]\(pictures/([^)]+)\)", path.read_text("utf-8"))
    missing = set(shown) - set(build.FIGURES) - {picture.name for picture in drawn.iterdir()}
    assert not missing, f"{path.name} shows {', '.join(sorted(missing))}, which it does not draw"
    assert_pictures_current(drawn, path.name)


def assert_pictures_current(drawn: Path, source: str) -> None:
    """Every picture in ``drawn`` is the one of the same name in docs/pictures/."""
    for picture in sorted(drawn.glob("*.png")):
        committed = build.PICTURES / picture.name
        assert committed.exists(), f"{source} draws {picture.name}, not in docs/pictures/"
        share = build.picture_difference(picture, committed)
        assert share <= build.OUTLIERS, (
            f"{source}: docs/pictures/{picture.name} is stale ({share:.2%} of its pixels "
            "differ); run `python docs/build.py` (or `make docs`)"
        )


def run_notebook(notebook: Path, work: Path, env: dict[str, str]) -> None:
    """Execute ``notebook``'s cells in a Jupyter kernel started in ``work`` with ``env``; a
    failing cell is named by its line of the page it was made from."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    book = nbformat.read(notebook, as_version=4)
    client = NotebookClient(
        book,
        timeout=300,  # seconds a cell may take
        shutdown_kernel="immediate",  # at the end: a graceful shutdown waits seconds for nothing
        resources={"metadata": {"path": str(work)}},
    )
    try:
        client.execute(env=env)
    except CellExecutionError as error:
        failed = next(
            cell
            for cell in book.cells
            if any(output.output_type == "error" for output in cell.get("outputs", []))
        )
        text = re.sub(r"\x1b\[[\d;]*m", "", str(error))  # the traceback without its colours
        line = failed.metadata.get("scratchformer", {}).get("line")
        if line is None:  # a cell that the page has not
            pytest.fail(f"{notebook.name}, cell {failed.id}: {text}")
        within = re.search(r"Cell In\[\d+\], line (\d+)", text)  # the failing cell's frame
        line += int(within.group(1)) - 1 if within else 0
        page = next(page for page, made in build.NOTEBOOKS.items() if made == notebook)
        pytest.fail(f"{page.name}:{line} (cell {failed.id} of {notebook.name}): {text}")


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
    pictures = tmp_path / "pictures"
    pictures.mkdir()
    monkeypatch.setenv("SCRATCHFORMER_PICTURES", str(pictures))
    env = {
        **os.environ,
        "PATH": f"{command_directory(tmp_path)}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",  # tiny models: one thread is fastest (see conftest.py)
        "MPLBACKEND": "Agg",
    }
    notebook = build.NOTEBOOKS.get(path)
    if notebook is not None:  # its Python blocks, current by test_generated_docs_are_current
        kernel_path = os.pathsep.join([str(ROOT), env["PYTHONPATH"]])  # docs.figures too
        run_notebook(notebook, work, {**env, "PYTHONPATH": kernel_path})
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for block in blocks(path):
        if not block.runs:
            continue
        if block.language == "python" and notebook is None:
            build.run_python(block, path, namespace)
        elif block.language == "bash":
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block.tested],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, (
                f"{path.name}:{block.line}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
            )
    assert_pictures_drawn(path, pictures)


def test_notebook_finds_the_repository_from_docs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jupyter runs a notebook in its directory, docs/: its first cell, which the page has
    not, makes ``docs.figures`` importable from there."""
    import nbformat

    for notebook in build.NOTEBOOKS.values():
        setup = nbformat.read(notebook, as_version=4).cells[1]
        assert setup.cell_type == "code" and "scratchformer" not in setup.metadata
        monkeypatch.chdir(ROOT / "docs")
        monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".") != ROOT])
        exec(setup.source, {})
        assert sys.path[0] == str(ROOT), f"{notebook.name}: its first cell did not find {ROOT}"


def test_figures_are_current(tmp_path: Path) -> None:
    """The pictures that docs/figures.py draws by itself (no snippet draws them)."""
    build.draw_figures(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(build.FIGURES)
    assert_pictures_current(tmp_path, "docs/figures.py")


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


def test_performance_page_is_short() -> None:
    size = len((ROOT / "docs" / "performance.md").read_bytes())
    assert size <= PERFORMANCE_LIMIT, (
        f"docs/performance.md has {size} bytes; move history to docs/lab-notes.md"
    )


def test_no_document_cites_an_issue() -> None:
    for path in DOCUMENTS:
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            assert not ISSUE.search(line), (
                f"{path.name}:{number}: say what the target was, not which issue asked: {line}"
            )


def test_generated_docs_are_current() -> None:
    stale = [str(path.relative_to(ROOT)) for path in build.stale()]
    assert not stale, f"{', '.join(stale)}: stale; run `python docs/build.py` (or `make docs`)"
