"""The commands that draw: ``attention``, ``plot`` and ``plot-pe``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import Recipe
from ..device import default_device
from ..errors import UsageError
from ..io import atomic_write_text
from ..opening import load_run
from ..tasks import TASKS
from ..training.rundir import CONFIG_FILE, METRICS_FILE
from ..viz import (
    attention_grid,
    attention_page,
    capture_attention,
    positional_encoding_figure,
    read_metrics,
    save_figure,
    training_curves,
)

PICTURE_FORMATS = ("png", "svg", "pdf")


def attention(args: argparse.Namespace) -> int:
    """``scratchformer attention DIR TEXT --out attn.png|attn.html``: what the model attends
    to, as a grid of heatmaps or as the interactive viewer."""
    out = Path(args.out)
    html = out.suffix.lower() in (".html", ".htm")
    if not html:
        _check_picture_format(out)
    task, model = load_run(Path(args.run), need_head=False)
    maps = capture_attention(task, model.to(default_device(args.device)), args.text, args.target)
    title = f"{Path(args.run).name}: {args.text}"
    if html:
        atomic_write_text(out, attention_page(maps, title=title))
        print(f"{out}: {', '.join(maps.kinds)} attention; open it in a browser")
        return 0
    kind = args.kind or maps.kinds[-1]  # cross-attention when there is any
    save_figure(attention_grid(maps, kind, args.layer, args.head), out)
    queries, keys = len(maps.queries[kind]), len(maps.keys[kind])
    print(f"{out}: {kind} attention, {queries} query x {keys} key tokens")
    return 0


def plot(args: argparse.Namespace) -> int:
    """``scratchformer plot DIR --out curves.png``: loss, learning rate, metric by step."""
    run_dir, out = Path(args.run), Path(args.out)
    _check_picture_format(out)
    metric = None
    if (run_dir / CONFIG_FILE).is_file():
        task_metric = TASKS[Recipe.load(run_dir / CONFIG_FILE).task].metric
        metric = None if task_metric == "loss" else task_metric
    records = read_metrics(run_dir / METRICS_FILE)
    save_figure(training_curves(records, metric, title=run_dir.name), out)
    print(f"{out}: training curves of {run_dir} ({len(records)} records)")
    return 0


def plot_positional(args: argparse.Namespace) -> int:
    """``scratchformer plot-pe --d-model D --length N --out pe.png``."""
    out = Path(args.out)
    _check_picture_format(out)
    try:
        figure = positional_encoding_figure(args.d_model, args.length)
    except ValueError as error:  # (the sizes the encoding refuses, named as options)
        raise UsageError(f"--d-model {args.d_model}: {error}") from None
    save_figure(figure, out)
    print(f"{out}: sinusoidal positional encoding, d_model={args.d_model}, {args.length} positions")
    return 0


def _check_picture_format(path: Path) -> None:
    if path.suffix.lower().lstrip(".") not in PICTURE_FORMATS:
        raise UsageError(
            f"--out {path}: the picture's name must end in .{', .'.join(PICTURE_FORMATS)}"
        )
