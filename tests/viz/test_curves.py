"""Training curves show what metrics.jsonl holds, and bad files name the line."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image
import pytest

from scratchformer.data.readers import DataError
from scratchformer.viz import read_metrics, training_curves


def write_records(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


RECORDS = [
    {"step": 10, "split": "train", "loss": 3.0, "lr": 1e-4, "tokens_per_s": 100.0},
    {"step": 20, "split": "train", "loss": 2.0, "lr": 2e-4, "tokens_per_s": 100.0},
    {"step": 20, "split": "val", "loss": 2.5, "accuracy": 0.4, "perplexity": 12.2},
    {"step": 30, "split": "train", "loss": 1.5, "lr": 1.5e-4, "tokens_per_s": 100.0},
    {"step": 40, "split": "train", "loss": 1.2, "lr": 1e-4, "tokens_per_s": 100.0},
    {"step": 40, "split": "val", "loss": 2.0, "accuracy": 0.6, "perplexity": 7.4},
]


def lines(axes) -> dict[str, tuple[list, list]]:
    return {
        line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
        for line in axes.get_lines()
    }


def test_three_panels_plot_the_logged_values(tmp_path: Path) -> None:
    path = write_records(tmp_path / "metrics.jsonl", RECORDS)
    figure = training_curves(read_metrics(path), title="run")
    loss, rate, score = figure.axes
    assert lines(loss)["training"] == ([10, 20, 30, 40], [3.0, 2.0, 1.5, 1.2])
    assert lines(loss)["validation"] == ([20, 40], [2.5, 2.0])
    (rates,) = lines(rate).values()
    assert rates == ([10, 20, 30, 40], [1e-4, 2e-4, 1.5e-4, 1e-4])
    assert score.get_title() == "validation accuracy"
    (accuracy,) = lines(score).values()
    assert accuracy == ([20, 40], [0.4, 0.6])
    picture = tmp_path / "curves.png"
    figure.savefig(picture, dpi=50)
    pixels = matplotlib.image.imread(picture)
    assert pixels.shape[1] > 500 and pixels[..., :3].std() > 0.05


def test_the_metric_can_be_chosen_and_a_resumed_step_shows_its_latest_value() -> None:
    resumed = [*RECORDS, {"step": 40, "split": "val", "loss": 1.9, "perplexity": 6.7}]
    figure = training_curves(resumed, metric="perplexity")
    assert lines(figure.axes[0])["validation"] == ([20, 40], [2.5, 1.9])
    (perplexity,) = lines(figure.axes[2]).values()
    assert perplexity == ([20, 40], [12.2, 6.7])


def test_bad_metrics_files_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "split": "train", "loss": 1}\n{"step": 2, "loss"\n')
    with pytest.raises(DataError, match=rf"^{path}:2: not a JSON record"):
        read_metrics(path)
    path.write_text('{"step": 1, "split": "train"}\n[1, 2]\n')
    with pytest.raises(DataError, match=rf"^{path}:2: a record needs 'step' and 'split'"):
        read_metrics(path)
    path.write_text("\n")
    with pytest.raises(DataError, match=rf"^{path}: empty file"):
        read_metrics(path)


def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    path = write_records(tmp_path / "metrics.jsonl", RECORDS[:2])
    with path.open("a") as file:
        file.write('{"step": 30, "split": "tr')  # a writer killed mid-record
    with pytest.warns(UserWarning, match=rf"^{path}:3: skipped a torn last line"):
        assert read_metrics(path) == RECORDS[:2]
    path.write_text('{"step": 1, "split": "train"}\n{"step": 2, "sp\n{"step": 3, "split": "tr')
    with pytest.raises(DataError, match=rf"^{path}:2: not a JSON record"):
        read_metrics(path)  # a bad line that has its end was not torn
