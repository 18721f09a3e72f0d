"""What an hour of pretraining buys on a laptop: the encoder recipe
(``recipes/pretrain-encoder.toml``) pretrained for 15, 30, 60 and 120 minutes on this
machine, and SST-2, CoNLL-2003 and SQuAD fine-tuned from each at their results-table rows'
budgets (``sst2-pretrained``, ``conll2003-pretrained``, ``squad-pretrained``).

    python benchmarks/pretraining_curve.py                 # every point still missing
    python benchmarks/pretraining_curve.py --minutes 15    # one point
    python docs/build.py                                   # its table and picture in the docs

A point's pretraining takes the recipe's steps for its hour scaled to its minutes, so that
its cosine schedule ends within its budget (on a slower CPU the budget stops it first).
The 60-minute point is the results table's own: ``results/pretrain-encoder.json`` and the
rows fine-tuned from it, which ``benchmarks/quality.py`` runs. Each other point is written
to ``results/curves/pretraining.json`` as soon as it is measured, so that a run cut short
goes on where it stopped (the curve takes hours). ``docs/build.py`` tables the points in
docs/performance.md and draws them (``figure``), each task's score against the
pretraining's minutes, with the random start's and MiniLM's rows as lines.
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
from results_table import PERCENT, cpu, shown
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


def points() -> dict[int, dict[str, Any]]:
    """Every point measured, the table's own among them, in order of minutes: the results
    of its pretraining and of each fine-tune measured from it, by task."""
    table = {"pretraining": _result("pretrain-encoder")}
    table.update({task: _result(task) for task in FINE_TUNES})
    measured = {int(m): point for m, point in read_curve()["points"].items()}
    found = sorted({**measured, TABLE_MINUTES: table}.items())
    return {minutes: point for minutes, point in found if point.get("pretraining") is not None}


def _result(task: str) -> dict[str, Any] | None:
    path = RESULTS / f"{task}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _score(result: dict[str, Any]) -> float:
    """A result's value as the table shows it: a share in percent."""
    return 100 * result["value"] if result["metric"] in PERCENT else result["value"]


def figure() -> Figure:
    """Each task's score against the pretraining's minutes of training, one panel a task,
    with the random start's and MiniLM's rows as horizontal lines (``docs/build.py`` draws
    it into ``docs/pictures/pretraining-curve.png``)."""
    figure = Figure(figsize=(11, 3.4), layout="constrained")
    measured = points().values()
    for axes, (task, (title, scratch, minilm)) in zip(
        figure.subplots(1, len(FINE_TUNES)), FINE_TUNES.items(), strict=True
    ):
        done = [point for point in measured if point.get(task) is not None]
        xs = [point["pretraining"]["train_seconds"] / 60 for point in done]
        axes.plot(xs, [_score(point[task]) for point in done], "o-", label="from our pretraining")
        for row, style, label in ((scratch, ":", "random start"), (minilm, "--", "MiniLM")):
            reference = _result(row)
            if reference is not None:
                axes.axhline(_score(reference), linestyle=style, color="#555555", label=label)
        axes.set_title(title, fontsize=10)
        axes.set_xlabel("minutes of pretraining on this CPU")
        axes.set_xscale("log", base=2)
        axes.set_xticks(xs, [f"{x:.1f}" for x in xs], minor=False)
        axes.minorticks_off()
    figure.axes[0].legend(fontsize=8, loc="best")
    return figure


def table() -> str:
    """The curve in Markdown: each point's pretraining and its fine-tunes' scores, between
    the random start's rows and MiniLM's."""
    titles = [title for title, _, _ in FINE_TUNES.values()]
    header = ["pretraining", "steps", "minutes trained", "MLM accuracy (val)", *titles, "CPU"]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    def scores(results: list[dict[str, Any] | None]) -> list[str]:
        return ["—" if r is None else shown(r["metric"], r["value"]) for r in results]

    scratch = [_result(row) for _, row, _ in FINE_TUNES.values()]
    minilm = [_result(row) for _, _, row in FINE_TUNES.values()]
    lines = [line(header), line(["---"] * len(header))]
    lines.append(line(["none (random start)", "—", "—", "—", *scores(scratch), "—"]))
    for minutes, point in points().items():
        pretraining = point["pretraining"]
        lines.append(
            line(
                [
                    f"{minutes} min budget",
                    f"{pretraining['steps']:,}",
                    f"{pretraining['train_seconds'] / 60:.1f}",
                    *scores([pretraining]),
                    *scores([point.get(task) for task in FINE_TUNES]),
                    cpu(pretraining),
                ]
            )
        )
    lines.append(line(["MiniLM (Microsoft's)", "—", "—", "—", *scores(minilm), "—"]))
    return "\n".join(lines)


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
    args = parser.parse_args()
    for minutes in args.minutes or [m for m in MINUTES if m != TABLE_MINUTES]:
        measure(minutes, args.threads)
    print(table())


if __name__ == "__main__":
    main()
