"""Regenerate the parts of the documentation that the code defines, so that they cannot go
stale: the recipe keys (from the config dataclasses' attribute docstrings), the command
line (from its argparse parser), the code quoted by the guide (from the source), the
pictures of ``docs/pictures/`` (drawn by the guide's snippets and by ``docs/figures.py``)
and ``docs/guide.ipynb``, the guide as a notebook (``docs/notebook.py``).

    python docs/build.py            # rewrite every generated region, redraw the pictures
                                    # (or: make docs)
    python docs/build.py --check    # exit 1, naming the files, if a region is stale
                                    # (tests/test_docs.py checks the pictures)

A generated region of README.md or docs/*.md lies between two markers:

    <!-- generated: quote nn/attention.py:scaled_dot_product_attention -->
    ...
    <!-- /generated -->

``quote PATH:NAME`` quotes a function, class or method (``Class.method``) of
``src/scratchformer/PATH``; ``recipe-keys CLASS`` tables the keys of a config dataclass;
``cli`` is the reference of every command and option; ``speed-table readme`` and
``speed-table page`` table the speed figures of ``docs/speed.toml``, which the README and
docs/performance.md share; ``defaults-table`` tables the defaults that differ from the
paper, from ``docs/paper_defaults.toml``, which docs/guide.md and docs/recipes.md share;
``pretraining-curve`` tables the points of ``benchmarks/pretraining_curve.py``.
Everything between the markers is replaced; everything around them is written by hand.

A picture is saved by a Python snippet of a document of ``PICTURED`` into the directory
that ``$SCRATCHFORMER_PICTURES`` names (the current one if unset), or drawn by a function
of ``docs/figures.py`` named in ``FIGURES``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import itertools
import os
import re
import shutil
import sys
import tempfile
import textwrap
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "scratchformer"
REGION = re.compile(r"(<!-- generated: (.+?) -->\n)(.*?)(<!-- /generated -->)", re.DOTALL)
COMMAND = "python docs/build.py"
PICTURES = ROOT / "docs" / "pictures"
PICTURED = [ROOT / "docs" / "guide.md"]
"""The documents whose snippets draw pictures."""
FIGURES = {"figure1.png": "figure1", "pretraining-curve.png": "pretraining_curve"}
"""Pictures drawn by a function of ``docs/figures.py``, not by a snippet."""
NOTEBOOKS = {ROOT / "docs" / "guide.md": ROOT / "docs" / "guide.ipynb"}
"""The pages written as a Jupyter notebook too (``docs/notebook.py``), which the tests run."""
SHADES = 2
"""Pictures drawn on two machines differ in the last bits of float math (AVX2 or AVX-512),
so a few pixels may differ by a shade or two: a picture is the same as another if its
pixels differ by at most ``SHADES`` of 255 in every channel, but for ``OUTLIERS`` of them."""
OUTLIERS = 0.001
FENCE = re.compile(r"^```(\w*)\s*$")
NO_RUN = re.compile(r"^<!-- no-run: (.+) -->$")
SHORTENED = re.compile(r"^<!-- shortened: (.+) -->$")
"""Marks a bash block that trains for minutes: the tests run it with these options given
to each of its ``scratchformer train`` commands (``--set train.max_steps=20``, say)."""
GENERATED = re.compile(r"^<!-- (/?)generated")
"""Code quoted between these markers is the source, not an example."""
sys.path.insert(0, str(SOURCE.parent))  # document this checkout's code, installed or not
sys.path.append(str(ROOT))  # the guide's snippets import docs.figures


def documents() -> list[Path]:
    """The files that may hold generated regions."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# -- quotes ------------------------------------------------------------------------------


def quote(spec: str, document: Path) -> str:
    """The source of ``PATH:NAME`` as a Python block, under a link to its file."""
    path, _, name = spec.partition(":")
    module = importlib.import_module("scratchformer." + path.removesuffix(".py").replace("/", "."))
    target: Any = module
    for part in name.split("."):
        target = getattr(target, part)
    code = textwrap.dedent(inspect.getsource(target)).rstrip()
    link = Path("..") if document.parent != ROOT else Path(".")
    href = (link / (SOURCE / path).relative_to(ROOT)).as_posix()
    return f"[`{path}`]({href}), `{name}`:\n\n```python\n{code}\n```\n"


# -- recipe keys -------------------------------------------------------------------------


def field_docstrings(cls: type) -> dict[str, str]:
    """The string literal that follows each field of dataclass ``cls`` in its source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = after.value.value
    return docs


def markdown(text: str) -> str:
    """A docstring or help text as one line of Markdown for a table: reST's ``code`` and
    :role:`name` as `code`; outside code, ``<`` escaped (``<TAB>`` is no HTML tag)."""
    text = re.sub(r":\w+:`~?\.?([^`]+)`", r"`\1`", " ".join(text.split())).replace("``", "`")
    parts = text.split("`")
    parts[::2] = [part.replace("<", "&lt;") for part in parts[::2]]  # outside code spans
    return "`".join(parts).replace("|", "\\|")


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of ``rows`` under ``header``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def read_toml(path: Path) -> dict[str, Any]:
    """A data file of docs/ (the standard tomllib, or tomli before Python 3.11)."""
    from scratchformer.config import tomllib

    return tomllib.loads(path.read_text(encoding="utf-8"))


def toml_value(value: Any) -> str:
    """A default as a recipe would write it."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value!r}`"


def type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(type_name(option) for option in typing.get_args(annotation))
    if annotation is type(None):
        return "none"
    if typing.get_origin(annotation) is list:
        return f"list of {type_name(typing.get_args(annotation)[0])}"
    return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
        annotation.__name__, annotation.__name__
    )


def recipe_keys(class_name: str, document: Path) -> str:
    """A table of every key of a config dataclass, its nested tables' keys included (each
    with the tasks that read it): type, default and its docstring."""
    from scratchformer import config

    cls = getattr(config, class_name)
    section = next(name for name, section in config.SECTIONS.items() if section is cls)
    return table(["key", "type", "default", "meaning"], key_rows(cls, section))


def key_rows(cls: type, prefix: str, readers: tuple[str, ...] = ()) -> list[list[str]]:
    """The rows of :func:`recipe_keys` for dataclass ``cls``, whose keys start ``prefix``."""
    from scratchformer import config

    docs = field_docstrings(cls)
    hints = typing.get_type_hints(cls)
    undocumented = [f.name for f in dataclasses.fields(cls) if f.name not in docs]
    if undocumented:
        raise ValueError(
            f"{cls.__name__} in src/scratchformer/config.py has no docstring for "
            f"{', '.join(undocumented)}: add a string literal after each field"
        )
    nested = config.tables(cls)
    read_by = f"(*{', '.join(readers)}*) " if readers else ""
    rows = []
    for field in dataclasses.fields(cls):
        if field.name in nested:
            rows += key_rows(hints[field.name], f"{prefix}.{field.name}", nested[field.name])
            continue
        missing = field.default is dataclasses.MISSING  # a list's default comes from a factory
        default = field.default_factory() if missing else field.default  # type: ignore[misc]
        rows.append(
            [
                f"`{prefix}.{field.name}`",
                type_name(hints[field.name]),
                toml_value(default),
                read_by + markdown(docs[field.name]),
            ]
        )
    return rows


# -- the command line --------------------------------------------------------------------


def value_of(action: argparse.Action) -> str:
    """What an argument takes, in words."""
    if action.nargs == 0:
        return "flag"
    if not action.option_strings:
        return ""
    if action.choices is not None:
        return " \\| ".join(f"`{choice}`" for choice in action.choices)
    kind = action.type
    if kind in (int, float):
        text = "an integer" if kind is int else "a number"
    elif inspect.isfunction(kind) and "wanted" in inspect.getclosurevars(kind).nonlocals:
        text = inspect.getclosurevars(kind).nonlocals["wanted"]  # the cli's bounded numbers
    else:
        text = f"`{action.metavar or action.dest.upper()}`"
    return text + (" (repeatable)" if isinstance(action, argparse._AppendAction) else "")


def default_of(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.nargs == 0 or action.default in (None, [], argparse.SUPPRESS):
        return ""
    return f"`{action.default}`"


def synopsis(name: str, parser: argparse.ArgumentParser, inherited: set[str]) -> str:
    """``scratchformer NAME ARG --opt VALUE [--flag]``, from the parser's arguments."""
    words = [f"scratchformer {name}"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.dest in inherited:
            continue
        if not action.option_strings:
            words.append(action.metavar or action.dest.upper())
            continue
        flag = action.option_strings[-1]
        word = flag if action.nargs == 0 else f"{flag} {action.metavar or action.dest.upper()}"
        words.append(word if action.required else f"[{word}]")
    return " ".join(words)


def argument_table(actions: list[argparse.Action], exclusive: dict[str, list[str]]) -> str:
    rows = []
    for action in actions:
        name = ", ".join(action.option_strings) or (action.metavar or action.dest.upper())
        meaning = markdown(action.help or "")
        others = [o for o in exclusive.get(action.dest, []) if o not in action.option_strings]
        if others:
            meaning += f" (not with {', '.join(f'`{o}`' for o in others)})"
        rows.append([f"`{name}`", value_of(action), default_of(action), meaning.strip()])
    return table(["argument", "value", "default", "meaning"], rows)


def cli(_: str, document: Path) -> str:
    """Every command and option of ``scratchformer``, from its parser."""
    from scratchformer.cli import GLOBAL_OPTIONS, build_parser

    parser = build_parser()
    global_dests = {option.flags[0].lstrip("-").replace("-", "_") for option in GLOBAL_OPTIONS}
    shown = [a for a in parser._actions if a.dest in global_dests]
    parts = [
        "### Global options\n",
        "Given before or after the command (`scratchformer --quiet train ...` or "
        "`scratchformer train ... --quiet`).\n",
        argument_table(shown, {}),
    ]
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in subparsers._choices_actions}
    for name, sub in subparsers.choices.items():
        exclusive: dict[str, list[str]] = {}
        for group in sub._mutually_exclusive_groups:
            flags = [flag for action in group._group_actions for flag in action.option_strings]
            for action in group._group_actions:
                exclusive[action.dest] = flags
        actions = [
            a
            for a in sub._actions
            if a.dest not in global_dests and not isinstance(a, argparse._HelpAction)
        ]
        parts += [
            f"### `scratchformer {name}`\n",
            f"{helps[name][0].upper()}{helps[name][1:]}.\n",
            *([markdown(sub.description) + "\n"] if sub.description else []),
            f"```text\n{synopsis(name, sub, global_dests)}\n```\n",
            argument_table(actions, exclusive) if actions else "",
        ]
    return "\n".join(parts).rstrip() + "\n"


# -- the speed figures -------------------------------------------------------------------

SPEED = ROOT / "docs" / "speed.toml"
"""The speed figures that the README and docs/performance.md share, one source for both."""


def speed_table(form: str, document: Path) -> str:
    """The rows of ``docs/speed.toml`` as a table: ``readme``, the rows it marks for the
    README, under their README words; ``page``, every row, with the machine's limit, each
    workload linked to the section of docs/performance.md that tells how it was measured."""
    data = read_toml(SPEED)
    rows, cpus = data["row"], data["cpus"]
    unknown = sorted({row["cpu"] for row in rows} - set(cpus))
    if unknown:
        raise ValueError(f"docs/speed.toml: no [cpus] entry for {', '.join(unknown)}")
    if form == "readme":
        shown = [r for r in rows if "readme" in r]
        return table(
            ["workload", "CPU", "ours", "against"],
            [[r["readme"], r["cpu"], r["ours"], r["against"]] for r in shown],
        )
    if form != "page":
        raise ValueError(f"speed-table {form!r}: give readme or page")
    page = "" if document.name == "performance.md" else "performance.md"
    figures = table(
        ["model", "workload", "CPU", "ours", "against", "limit"],
        [
            [r["model"], f"[{r['workload']}]({page}#{r['section']})"]
            + [r[key] for key in ("cpu", "ours", "against", "limit")]
            for r in rows
        ],
    )
    legend = [f"- {name}: {meaning}." for name, meaning in cpus.items()]
    return figures + "\nThe CPUs:\n\n" + "\n".join(legend) + "\n"


# -- the defaults that differ from the paper ---------------------------------------------

PAPER_DEFAULTS = ROOT / "docs" / "paper_defaults.toml"
"""The rows of the table that docs/guide.md and docs/recipes.md share, one source for both."""


def defaults_table(_: str, document: Path) -> str:
    """The rows of ``docs/paper_defaults.toml``: each setting, the paper's, our default, and
    the recipe keys that restore the paper's."""
    return table(
        ["setting", "the paper", "scratchformer's default", "recipe key(s) that restore the paper"],
        [
            [r["setting"], r["paper"], r["default"], r["restore"]]
            for r in read_toml(PAPER_DEFAULTS)["row"]
        ],
    )


def pretraining_curve(_: str, document: Path) -> str:
    """The points of the pretraining curve, as ``benchmarks/pretraining_curve.py`` tables
    them."""
    return importlib.import_module("docs.figures").benchmark("pretraining_curve").table() + "\n"


GENERATORS: dict[str, Callable[[str, Path], str]] = {
    "quote": quote,
    "defaults-table": defaults_table,
    "recipe-keys": recipe_keys,
    "cli": cli,
    "speed-table": speed_table,
    "pretraining-curve": pretraining_curve,
}


# -- code blocks and pictures -----------------------------------------------------------


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int
    """1-based line of the first line of code in its file."""
    runs: bool
    """False when the block is preceded by ``<!-- no-run: why -->``."""
    shortened: str = ""
    """The options of ``<!-- shortened: OPTIONS -->`` before the block, for its trainings."""

    @property
    def tested(self) -> str:
        """The code as the tests run it: its trainings shortened, if the block says so."""
        if not self.shortened:
            return self.code
        train = "scratchformer train "
        return self.code.replace(train, f"{train}{self.shortened} ")


def blocks(path: Path, text: str | None = None) -> list[Block]:
    """The fenced code blocks of a Markdown file (of ``text`` if given, else the file's),
    but those of generated regions."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
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
        short = SHORTENED.match(before)
        options = short.group(1) if short else ""
        found.append(Block(language, code, start + 1, NO_RUN.match(before) is None, options))
        start = None
    assert start is None, f"{path}:{start}: unclosed code block"
    return found


def run_python(block: Block, path: Path, namespace: dict[str, Any]) -> None:
    """Run a Python block in ``namespace``; its tracebacks name its lines of ``path``."""
    exec(compile("\n" * (block.line - 1) + block.code, str(path), "exec"), namespace)


def save_picture(figure: Any, path: Path) -> None:
    """A matplotlib figure as a PNG, without the version stamp that would differ by machine."""
    figure.savefig(path, dpi=100, metadata={"Software": None})


def draw_figures(directory: Path) -> None:
    """Draw the pictures of ``FIGURES`` into ``directory``."""
    figures = importlib.import_module("docs.figures")
    for name, function in FIGURES.items():
        save_picture(getattr(figures, function)(), directory / name)


def draw_pictures(directory: Path) -> None:
    """Draw every picture into ``directory``: those of ``FIGURES``, and those of the
    documents of ``PICTURED``, whose Python snippets run, in order in one namespace each, in
    a temporary working directory with ``$SCRATCHFORMER_PICTURES`` set to ``directory``."""
    draw_figures(directory)
    before, pictures = Path.cwd(), os.environ.get("SCRATCHFORMER_PICTURES")
    with tempfile.TemporaryDirectory() as work:
        os.chdir(work)
        os.environ["SCRATCHFORMER_PICTURES"] = str(directory.resolve())
        try:
            for document in PICTURED:
                namespace: dict[str, Any] = {"__name__": "__docs__"}
                for block in blocks(document):
                    if block.language == "python" and block.runs:
                        run_python(block, document, namespace)
        finally:
            os.chdir(before)
            os.environ.pop("SCRATCHFORMER_PICTURES")
            if pictures is not None:
                os.environ["SCRATCHFORMER_PICTURES"] = pictures


def picture_difference(drawn: Path, committed: Path) -> float:
    """The share of the pixels of two PNGs that differ by more than ``SHADES`` (1.0 when
    their sizes differ)."""
    from matplotlib.image import imread

    first, second = (np.round(imread(path) * 255).astype(np.int16) for path in (drawn, committed))
    if first.shape != second.shape:
        return 1.0
    return float((np.abs(first - second) > SHADES).any(axis=-1).mean())


def update_pictures() -> None:
    """Redraw the pictures; write over those of ``docs/pictures/`` that changed."""
    PICTURES.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as temp:
        draw_pictures(Path(temp))
        for drawn in sorted(Path(temp).glob("*.png")):
            committed = PICTURES / drawn.name
            if not committed.exists() or picture_difference(drawn, committed) > OUTLIERS:
                shutil.copyfile(drawn, committed)
                print(f"wrote {committed.relative_to(ROOT)}")


# -- the documents -----------------------------------------------------------------------


def rendered(document: Path) -> str:
    """``document``'s text with every generated region regenerated."""

    def fill(match: re.Match[str]) -> str:
        kind, _, argument = match.group(2).partition(" ")
        if kind not in GENERATORS:
            raise ValueError(f"{document.name}: unknown generated region {kind!r}")
        return match.group(1) + GENERATORS[kind](argument.strip(), document) + match.group(4)

    return REGION.sub(fill, document.read_text(encoding="utf-8"))


def notebook(page: Path, text: str) -> str:
    """The text of the notebook of ``page`` (one of ``NOTEBOOKS``), made from the page's
    ``text`` as it is written (its regions regenerated)."""
    from docs.notebook import notebook as make

    return make(page, text, blocks(page, text))


def generated() -> list[tuple[Path, str]]:
    """Every generated file and the text it should hold: the documents with their regions
    regenerated, and the notebooks made from their pages."""
    pages = {path: rendered(path) for path in documents()}
    notebooks = {written: notebook(page, pages[page]) for page, written in NOTEBOOKS.items()}
    return [*pages.items(), *notebooks.items()]


def is_current(path: Path, text: str) -> bool:
    return path.exists() and path.read_text(encoding="utf-8") == text


def stale() -> list[Path]:
    """The documents whose generated regions differ from what the code gives now, and the
    notebooks that differ from their pages."""
    return [path for path, text in generated() if not is_current(path, text)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that they are current")
    args = parser.parse_args()
    if args.check:
        outdated = stale()
        if outdated:
            names = ", ".join(str(path.relative_to(ROOT)) for path in outdated)
            sys.exit(f"{names}: generated documentation is stale; run {COMMAND} (or make docs)")
        return
    for path, text in generated():
        if not is_current(path, text):
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    update_pictures()


if __name__ == "__main__":
    main()
