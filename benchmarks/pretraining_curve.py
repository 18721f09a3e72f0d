"""What an hour of pretraining buys on a laptop: the encoder recipe
(``recipes/pretrain-encoder.toml``) pretrained for 15, 30, 60 and 120 minutes on this
machine, and SST-2, CoNLL-2003 and SQuAD fine-tuned from each at their results-table rows'
budgets (``sst2-pretrained``, ``conll2003-pretrained``, ``squad-pretrained``).

    python benchmarks/pretraining_curve.py                 # every point still missing
    python benchmarks/pretraining_curve.py --minutes 15    # one point
    python benchmarks/pretraining_curve.py --draw docs/pictures/pretraining-curve.png

A point's pretraining takes the recipe's steps for its hour scaled to its minutes, so that
its cosine schedule ends within its budget (on a slower CPU the budget stops it first).
The 60-minute point is the results table's own: ``results/pretrain-encoder.json`` and the
rows fine-tuned from it, which ``benchmarks/quality.py`` runs. Each other point is written
to ``results/curves/pretraining.json`` as soon as it is measured, so that a run cut short
goes on where it stopped (the curve takes hours). ``--draw`` plots each task's score
against the pretraining's minutes, with the random start's and MiniLM's rows as lines.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from quality import RESULTS, ROOT, ROWS, Row, run_row
from scratchformer.config import Recipe
from scratchformer.io import atomic_write_text

MINUTES = (15, 30, 60, 120)
"""The pretraining budgets of the curve."""
TABLE_MINUTES = 60
"""The budget of the results table's ``pretrain-encoder`` row: its point is that row's."""
FINE_TUNES = {
    "sst2-pretrained": ("SST-2 accuracy (val)", "sst2", "sst2-minilm"),
    "conll2003-pretrained": ("CoNLL-2003 entity F1 (val)", "conll2003", "conll2003-minilm"),
    "squad-pretrained": ("SQuAD F1 (dev)", "squad", "squad-minilm"),
}
"""The fine-tunes of each point: the axis title, then the rows of a random start and of
MiniLM, drawn as references."""
CURVE = RESULTS / "curves" / "pretraining.json"
"""The points measured off the results table (not a row of it: in a folder of its own)."""
RUNS = Path("runs/curve")
"""Where the points' runs go, from the project root."""
RECIPES = ROOT / "recipes"


def pretraining_row(minutes: int) -> Row:
    """The ``pretrain-encoder`` row pretrained for ``minutes``, its steps scaled to them."""
    table = ROWS["pretrain-encoder"]
    steps = round(recipe_steps() * minutes / TABLE_MINUTES)
    return replace(
        table,
        task=f"pretrain-encoder-{minutes}min",
        budget_minutes=minutes,
        settings=(*table.settings, f"train.max_steps={steps}"),
    )


def recipe_steps() -> int:
    """The pretraining recipe's ``train.max_steps``: the steps of its hour."""
    return Recipe.load(RECIPES / f"{ROWS['pretrain-encoder'].recipe}.toml").train.max_steps


def fine_tune_row(task: str, pretraining: Row) -> Row:
    """The results table's row ``task``, fine-tuned from ``pretraining``'s run instead."""
    return replace(
        ROWS[task],
        task=f"{task}-{pretraining.budget_minutes:g}min",
        settings=(f"train.init_from={RUNS / pretraining.task}",),
    )


def read_curve() -> dict[str, Any]:
    """The points measured so far, by their minutes (as strings: JSON's keys)."""
    return json.loads(CURVE.read_text()) if CURVE.exists() else {"points": {}}


def measure(minutes: int, threads: int) -> None:
    """Pretrain for ``minutes`` and fine-tune each task from it, writing each result into
    :data:`CURVE` as it comes; what it already holds is not run again."""
    curve = read_curve()
    point = curve["points"].setdefault(str(minutes), {})
    pretraining = pretraining_row(minutes)
    if "pretraining" not in point or not (ROOT / RUNS / pretraining.task).exists():
        print(f"{pretraining.task}: pretraining for at most {minutes} min ...", flush=True)
        point.clear()
        point["pretraining"] = run_row(pretraining, threads, RUNS)
        save(curve)
    for task in FINE_TUNES:
        if task not in point:
            row = fine_tune_row(task, pretraining)
            print(f"{row.task}: fine-tuning for at most {row.budget_minutes:g} min ...", flush=True)
            point[task] = run_row(row, threads, RUNS)
            save(curve)
            shutil.rmtree(ROOT / RUNS / row.task)  # (the score is kept; the weights are not)


def save(curve: dict[str, Any]) -> None:
    CURVE.parent.mkdir(exist_ok=True)
    atomic_write_text(CURVE, json.dumps(curve, indent=2) + "\n")


def points(curve: dict[str, Any]) -> list[dict[str, Any]]:
    """Every point measured, the table's own at its minutes, in order of minutes: its
    pretraining's minutes of training and each fine-tune's score."""
    found = []
    table = {"pretraining": _result("pretrain-encoder")}
    table.update({task: _result(task) for task in FINE_TUNES})
    measured = {int(m): point for m, point in curve["points"].items()}
    for minutes, point in sorted({**measured, TABLE_MINUTES: table}.items()):
        if point.get("pretraining") is None:
            continue
        scores = {task: point[task]["value"] for task in FINE_TUNES if point.get(task) is not None}
        train_minutes = point["pretraining"]["train_seconds"] / 60
        found.append({"minutes": minutes, "train_minutes": train_minutes, "scores": scores})
    return found


def _result(task: str) -> dict[str, Any] | None:
    path = RESULTS / f"{task}.json"
    return json.loads(path.read_text()) if path.exists() else None


def draw(curve: dict[str, Any], out: Path) -> None:
    """Each task's score against the pretraining's minutes of training, one panel a task,
    with the random start's and MiniLM's rows as horizontal lines."""
    figure = Figure(figsize=(11, 3.4), layout="constrained")
    measured = points(curve)
    for axes, (task, (title, scratch, minilm)) in zip(
        figure.subplots(1, len(FINE_TUNES)), FINE_TUNES.items(), strict=True
    ):
        xs = [p["train_minutes"] for p in measured if task in p["scores"]]
        ys = [p["scores"][task] for p in measured if task in p["scores"]]
        axes.plot(xs, ys, "o-", color="#1f77b4", label="from our pretraining")
        for row, style, label in ((scratch, ":", "random start"), (minilm, "--", "MiniLM")):
            reference = _result(row)
            if reference is not None:
                axes.axhline(reference["value"], linestyle=style, color="#555555", label=label)
        axes.set_title(title, fontsize=10)
        axes.set_xlabel("minutes of pretraining")
        axes.set_xscale("log", base=2)
        axes.set_xticks([m for m in MINUTES], [str(m) for m in MINUTES])
    figure.axes[0].legend(fontsize=8, loc="lower right")
    figure.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes",
        type=int,
        action="append",
        choices=[m for m in MINUTES if m != TABLE_MINUTES],
        help="a point to measure (repeatable; default: every one still missing)",
    )
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (default: 2)")
    parser.add_argument("--draw", type=Path, metavar="PNG", help="only draw the curve measured")
    args = parser.parse_args()
    if args.draw is not None:
        draw(read_curve(), args.draw)
        return
    for minutes in args.minutes or [m for m in MINUTES if m != TABLE_MINUTES]:
        measure(minutes, args.threads)
    for point in points(read_curve()):
        scores = ", ".join(f"{task} {value:.4g}" for task, value in point["scores"].items())
        print(f"{point['minutes']} min ({point['train_minutes']:.1f} trained): {scores}")


if __name__ == "__main__":
    main()
