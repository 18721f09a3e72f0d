"""Training curves from a run's ``metrics.jsonl``: loss (training and validation), the
learning rate, and the task's validation metric, against steps."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ..data.readers import DataError, iter_lines

METRICS = ("exact_match", "entity_f1", "accuracy", "pearson", "bleu", "perplexity")
"""Validation metrics the third panel shows, the first one present."""

PLOTTED = ("loss", "lr", *METRICS)
"""The fields of a record that are drawn: numbers when present."""

Record = Mapping[str, Any]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``, each with ``step`` and ``split`` (an empty file
    is an error). A torn last line, cut short by a killed writer or a full disk, is skipped
    with a warning."""
    records = []
    for number, line in enumerate(iter_lines(path), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if not line.endswith("\n"):  # only the last line can lack its end
                warnings.warn(f"{path}:{number}: skipped a torn last line", stacklevel=2)
                break
            raise DataError.at(path, number, f"not a JSON record ({error.msg})") from None
        if not isinstance(record, dict) or not {"step", "split"} <= record.keys():
            raise DataError.at(path, number, "a record needs 'step' and 'split'")
        wrong = [key for key in PLOTTED if key in record and not _is_number(record[key])]
        step = record["step"]
        if (
            not (isinstance(step, int) and _is_number(step))
            or not isinstance(record["split"], str)
            or wrong
        ):
            fields = ", ".join(f"{key}={record[key]!r}" for key in ["step", *wrong])
            raise DataError.at(path, number, f"a record's step and scores are numbers ({fields})")
        records.append(record)
    return records


def training_curves(
    records: Iterable[Record], metric: str | None = None, title: str = ""
) -> Figure:
    """Three panels against steps: training and validation loss, learning rate, and the
    validation ``metric`` (default: the first of :data:`METRICS` logged). A step logged
    twice (a run resumed from an earlier checkpoint) shows its latest value."""
    records = list(records)
    train, val = _series(records, "train"), _series(records, "val")
    if not train and not val:
        raise ValueError("the records hold no training or validation steps")
    if metric is None:
        metric = next((m for m in METRICS if any(m in r for r in val.values())), None)

    figure = Figure(figsize=(13, 3.8), layout="constrained")
    loss, rate, score = figure.subplots(1, 3)
    _plot(loss, train, "loss", "training", alpha=0.6)
    _plot(loss, val, "loss", "validation", marker="o")
    loss.set_title("loss")
    if any("loss" in r for r in {**train, **val}.values()):
        loss.legend()
    _plot(rate, train, "lr", None)
    rate.set_title("learning rate")
    rate.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    if metric is not None:
        _plot(score, val, metric, None, marker="o")
        score.set_title(f"validation {metric}")
    else:
        score.set_axis_off()
        score.text(0.5, 0.5, "no validation metric logged", ha="center", va="center")
    for axes in (loss, rate, score):
        axes.set_xlabel("step")
        axes.grid(alpha=0.3)
    if title:
        figure.suptitle(title)
    return figure


def _series(records: Iterable[Record], split: str) -> dict[int, Record]:
    """The records of one split by step, later ones replacing earlier ones."""
    return {int(r["step"]): r for r in records if r["split"] == split}


def _plot(axes: Any, series: dict[int, Record], key: str, label: str | None, **style: Any) -> None:
    points = sorted((step, r[key]) for step, r in series.items() if key in r)
    if points:
        steps, values = zip(*points, strict=True)
        axes.plot(steps, values, label=label, **style)
