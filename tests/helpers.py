"""Small helpers shared by tests."""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

from scratchformer.cli import main


def set_options(settings: Iterable[str]) -> list[str]:
    """``["a.b=1", "c.d=2"]`` -> ``["--set", "a.b=1", "--set", "c.d=2"]``."""
    return [part for setting in settings for part in ("--set", setting)]


RECIPES = Path(__file__).resolve().parents[1] / "recipes"
TINY = [
    "model.d_model=32",
    "model.d_ff=64",
    "model.n_layers=1",
    "train.max_steps=6",
    "train.eval_every=3",
    "train.batch_size=4",
]


def train(run_dir: Path, recipe: str, *settings: str) -> None:
    args = ["--quiet", "train", str(RECIPES / recipe), "--out", str(run_dir)]
    assert main([*args, *set_options([*TINY, *settings])]) == 0


def run(capsys, monkeypatch, stdin: str, *args: str) -> tuple[int, list[str], str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    capsys.readouterr()
    status = main(["--quiet", *args])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err
