"""Every option of every command, drawn from the command's own parser: numbers huge,
negative, not finite or not numbers, texts of any characters, choices that are not among
the choices, paths missing, taken or of the wrong kind, runs of another task, recipe
settings of any key and value. Each command answers (exit 0) or refuses in one line that
names an option or value it was given; it never writes outside its ``--out``, never
changes a run it reads, never leaves a run unreadable and never runs past a bound."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.strategies import assert_sound_or_refused, cli, examples
from scratchformer.cli import build_parser, one_line
from scratchformer.run import load_run

SUBCOMMANDS: dict[str, argparse.ArgumentParser] = next(
    action.choices
    for action in build_parser()._actions
    if isinstance(action, argparse._SubParsersAction)
)
SKIPPED = {"help", "debug", "quiet"}
"""Options every command shares whose values change no outcome (``--device`` is drawn)."""

OWN_RUN = {
    "merge": "lora",
    "quantize": "copy",
    "generate": "lm",
    "translate": "copy",
    "classify": "classification",
    "tag": "tagging",
    "answer": "qa",
    "fill-mask": "mlm",
    "fill-spans": "span",
    "serve": "lm",
    "export-onnx": "classification",
    "export-peft": "lora",
    "export-gguf": "lm",
}
"""The run each command is for (the others take a run of any task)."""

STDIN = {
    "translate": "3 4 5\n",
    "classify": "good fun\n",
    "tag": "Peter went to Paris\n",
    "answer": "Who won?\tThe winner is Ada.\n",
    "fill-mask": "the cat [MASK] on the mat .\n",
    "fill-spans": "the man<extra_id_0> in the park\n",
}

NUMBERS = st.sampled_from(
    ["0", "1", "2", "3", "-1", "0.5", "1e-9", "1e9", "nan", "inf", "-inf", "1e400", "",
     "x", "0x10", " 4", "\u0663", "2147483648", "9223372036854775808", "-9223372036854775809"]
) | st.integers(-2, 40).map(str)  # fmt: skip
SMALL_NUMBERS = st.integers(-2, 24).map(str) | st.sampled_from(["nan", "1e9x", ""])
"""For the amounts of work a user may ask as large as they like (they are not refused)."""
TEXTS = st.text(max_size=12) | st.sampled_from(
    ["", "-", "--", "-h", "--set", "<extra_id_0>", "[MASK]", "\x00", "\udcff", "a\tb\nc"]
)
SETTING_KEYS = st.sampled_from(
    ["model.d_model", "model.n_heads", "model.n_layers", "model.dropout", "model.norm",
     "model.positional", "data.vocab_size", "data.tokenizer", "train.lr", "train.batch_size",
     "train.seed", "train.warmup_steps", "train.lora_rank", "task", "model", "unknown.key", ""]
)  # fmt: skip
SETTING_VALUES = NUMBERS | TEXTS | st.sampled_from(["'char'", "[1]", "{a=1}"])
SETTINGS = st.builds("{}={}".format, SETTING_KEYS, SETTING_VALUES) | TEXTS
PLACES = ["new", "x.png", "x.html", "x.svg", "x.txt", "x", "file.txt", "full", "file.txt/x",
          "", "existing-run", "missing/deeper/run"]  # fmt: skip
"""Where an ``--out`` (or a path read) may point, in the example's scratch directory."""
HOSTS = ["127.0.0.1", "::1", "localhost", "1.2.3.4", "::ffff:1.2.3.4"]
"""Addresses that need no name server (a name to look up could wait on one)."""


@st.composite
def arguments(draw: st.DrawFn, command: str, runs: dict[str, Path], hf: Path) -> list[str]:
    """Options of ``command``, each present or not, with values of every kind."""
    argv: list[str] = []
    for action in SUBCOMMANDS[command]._actions:
        name = action.dest
        optional = action.option_strings and not action.required
        if name in SKIPPED or (optional and not draw(st.booleans())):
            continue
        flag = [action.option_strings[0]] if action.option_strings else []
        if action.nargs == 0:
            argv += flag
            continue
        repeats = 2 if isinstance(action, argparse._AppendAction) else 1
        strategy = value_of(action, command, runs, hf)
        for value in draw(st.lists(strategy, min_size=1, max_size=repeats)):
            argv += [*flag, value]
    return argv


def value_of(
    action: argparse.Action, command: str, runs: dict[str, Path], hf: Path
) -> st.SearchStrategy[str]:
    name = action.dest
    places = st.sampled_from(PLACES)
    if name == "run":
        own = OWN_RUN.get(command, "copy")
        return st.sampled_from([str(runs[own])] * 4 + [str(p) for p in runs.values()]) | places
    if name == "recipe":
        return st.just("recipe.toml") | places
    if name == "hf_dir":
        return st.just(str(hf)) | places
    if name in ("out", "data", "onnx"):
        return places
    if name == "set":
        return SETTINGS
    if name == "host":
        return st.sampled_from(HOSTS)
    if name == "device":
        return st.sampled_from(["auto", "cpu", "cuda"])
    if action.choices:
        return st.sampled_from(list(action.choices)) | TEXTS
    if name in ("max_new_tokens", "batch_size"):
        return SMALL_NUMBERS
    if action.type is not None:
        return NUMBERS
    return TEXTS


def listing(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory``: its size and time of change."""
    return {
        str(path.relative_to(directory)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


class Hang(BaseException):
    """An example ran past its bound (a ``BaseException``: no ``except Exception`` hides it)."""


@contextmanager
def bounded(seconds: int) -> Iterator[None]:
    def stop(*_: object) -> None:
        raise Hang(f"the command ran for more than {seconds} s")

    before = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


@pytest.fixture(scope="module")
def runs(
    copy_run, lora_copy_run, classification_run, tagging_run, qa_run, mlm_run, span_run, lm_run,
    tmp_path_factory,
) -> dict[str, Path]:  # fmt: skip
    """Copies of the suite's runs, one of each task, which the commands read."""
    originals = {"copy": copy_run, "lora": lora_copy_run, "classification": classification_run}
    originals |= {"tagging": tagging_run, "qa": qa_run, "mlm": mlm_run, "span": span_run}
    originals["lm"] = lm_run
    home = tmp_path_factory.mktemp("fuzzed-runs")
    return {kind: Path(shutil.copytree(run, home / kind)) for kind, run in originals.items()}


TINY_RECIPE = """
task = "synthetic"
[model]
d_model = 32
n_heads = 4
n_layers = 1
d_ff = 64
[data]
dataset = "copy"
tokenizer = "char"
vocab_size = 20
[data.synthetic]
train_size = 40
val_size = 8
[train]
max_steps = 2
batch_size = 4
eval_every = 2
"""
"""A recipe that trains in moments."""


def scratch_directory(where: Path, runs: dict[str, Path]) -> None:
    """The example's working directory: a recipe, a file, a full directory and a run."""
    (where / "recipe.toml").write_text(TINY_RECIPE)
    (where / "file.txt").write_text("text\tlabel\ngood\tpos\n")
    (where / "full").mkdir()
    (where / "full" / "data.tsv").write_text("text\tlabel\ngood\tpos\n")
    shutil.copytree(runs["copy"], where / "existing-run")


COMMANDS = sorted(set(SUBCOMMANDS) - {"demo"})
"""Every command but ``demo`` (its one option, ``--out``, is fuzzed as every other's is; a
demo that starts trains for minutes)."""


@pytest.mark.parametrize("command", COMMANDS)
@settings(
    max_examples=examples(5),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_options_are_used_or_refused_in_one_line(command, runs, tiny_gpt2, data) -> None:
    before = {kind: listing(run) for kind, run in runs.items()}
    options = data.draw(arguments(command, runs, tiny_gpt2))
    device = data.draw(st.sampled_from([[], ["--device", "cpu"], ["--device", "cuda"]]))
    with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
        where = Path(scratch)
        scratch_directory(where, runs)
        patch.chdir(where)
        # --compile is fuzzed for its checks; what compiling gives is tests/inference's
        patch.setattr(torch, "compile", lambda model, *_, **__: model)
        patch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
        scratch_before = listing(where)
        with bounded(120):
            status, _, err = cli(command, *device, *options, stdin=STDIN.get(command, ""))
        actions = SUBCOMMANDS[command]._actions
        flags = [f for action in actions for f in action.option_strings or [action.dest]]
        given = [one_line(o) for o in options if o]
        given += [name for o in options if "=" in o for name in (o.split("=")[0], key(o))]
        assert_sound_or_refused(status, err, *given, *flags, *device, "standard input")
        changed = {
            path for path, stamp in listing(where).items() if scratch_before.get(path) != stamp
        }
        out = written(options)
        outside = {p for p in changed if not (out and (p == out or p.startswith(out + "/")))}
        assert not outside, f"written outside --out {out!r}: {sorted(outside)}"
        load_run(where / "existing-run")
    assert {kind: listing(run) for kind, run in runs.items()} == before, "a run read was changed"


def key(setting: str) -> str:
    """``section.key`` of a ``--set section.key=value``, as an error names it: ``[section]
    key``."""
    section, _, name = setting.split("=")[0].rpartition(".")
    return f"[{section}] {name}" if section else name


def written(options: list[str]) -> str | None:
    """The path ``--out`` names (the last given), as written under the scratch directory."""
    outs = [options[i + 1] for i, option in enumerate(options[:-1]) if option == "--out"]
    return os.path.normpath(outs[-1]) if outs and outs[-1] else None
