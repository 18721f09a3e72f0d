"""The pretraining curve's bookkeeping: each point's runs, a cut run resumed without
running again what it measured, the results table's rows as its 60-minute point, and the
drawing (the runs themselves are the results table's recipes, tested there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from matplotlib.image import imread

from test_results_table import load

curve = load("pretraining_curve")


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """The rows run, in order, each by a stand-in that makes its run directory and gives a
    result whose value says which row it was; results are read and written in ``tmp_path``."""
    runs: list[str] = []
    monkeypatch.setattr(curve, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(curve, "CURVE", tmp_path / "results" / "curves" / "pretraining.json")
    monkeypatch.setattr(curve, "ROOT", tmp_path)
    (tmp_path / "results").mkdir()

    def run_row(row, threads: int, runs_dir: Path) -> dict[str, Any]:
        runs.append(row.task)
        (tmp_path / runs_dir / row.task).mkdir(parents=True, exist_ok=True)
        value = float(len(runs))
        seconds = 60.0 * row.budget_minutes
        return {
            "task": row.task,
            "metric": "f1",
            "value": value,
            "steps": 100,
            "train_seconds": seconds,
        }

    monkeypatch.setattr(curve, "run_row", run_row)
    return runs


def test_a_point_pretrains_then_fine_tunes_from_its_run(ran: list[str]) -> None:
    pretraining = curve.pretraining_row(15)
    assert pretraining.recipe == "pretrain-encoder" and pretraining.budget_minutes == 15
    assert f"train.max_steps={round(curve.recipe_steps() / 4)}" in pretraining.settings
    sst2 = curve.fine_tune_row("sst2-pretrained", pretraining)
    assert sst2.settings == ("train.init_from=runs/curve/pretrain-encoder-15min",)
    assert sst2.budget_minutes == curve.ROWS["sst2-pretrained"].budget_minutes
    curve.measure(15, threads=2)
    assert ran == [
        "pretrain-encoder-15min",
        "sst2-pretrained-15min",
        "conll2003-pretrained-15min",
        "squad-pretrained-15min",
    ]


def test_a_cut_run_goes_on_where_it_stopped(ran: list[str]) -> None:
    curve.measure(30, threads=2)
    saved = json.loads(curve.CURVE.read_text())
    del saved["points"]["30"]["squad-pretrained"]  # as if cut during SQuAD's fine-tune
    curve.CURVE.write_text(json.dumps(saved))
    ran.clear()
    curve.measure(30, threads=2)
    assert ran == ["squad-pretrained-30min"]


def test_the_tables_rows_are_the_hour_and_the_table_and_picture_show_them(
    ran: list[str], tmp_path: Path
) -> None:
    curve.measure(15, threads=2)
    hour = {"pretrain-encoder": 0.3, "sst2-pretrained": 0.84, "sst2": 0.82}
    for task, value in hour.items():
        result = {"metric": "accuracy", "value": value, "steps": 6500, "train_seconds": 3000.0}
        (curve.RESULTS / f"{task}.json").write_text(json.dumps(result))
    measured = curve.points()
    assert list(measured) == [15, 60]
    assert measured[60]["pretraining"]["value"] == 0.3
    assert measured[60]["sst2-pretrained"]["value"] == 0.84
    assert measured[60]["squad-pretrained"] is None  # not run: a gap in the table
    assert [measured[15][task]["value"] for task in curve.FINE_TUNES] == [2.0, 3.0, 4.0]

    lines = curve.table().splitlines()
    assert lines[2] == "| none (random start) | — | — | — | 82.0% | — | — | — |"
    assert lines[3] == "| 15 min budget | 100 | 15.0 | 1.000 | 2.000 | 3.000 | 4.000 | — |"
    assert lines[4] == "| 60 min budget | 6,500 | 50.0 | 30.0% | 84.0% | — | — | — |"
    assert lines[-1] == "| MiniLM (Microsoft's) | — | — | — | — | — | — | — |"

    figure = curve.figure()
    sst2 = figure.axes[0].lines
    assert list(sst2[0].get_xdata()) == [15.0, 50.0]  # minutes trained
    assert list(sst2[0].get_ydata()) == [2.0, 84.0]  # the stand-in's f1, then 84.0%
    assert list(sst2[1].get_ydata()) == [82.0, 82.0]  # the random start's row
    out = tmp_path / "curve.png"
    figure.savefig(out)
    assert imread(out).shape[1] > 1000
