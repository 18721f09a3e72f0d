"""``scratchformer demo``: a small encoder-decoder learns to reverse digit strings, with no
data files and no network, in under a minute of training on a laptop CPU; then it shows what
it does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .config import Recipe
from .models import count_parameters
from .run import load_run, train
from .tasks import Task
from .training.rundir import ATTENTION_PICTURE
from .viz import attention_heatmap, capture_attention, save_figure

DEMO_RECIPE: dict[str, Any] = {
    "task": "synthetic",
    "model": {"d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 256, "dropout": 0.0},
    "data": {
        "dataset": "reverse",
        "tokenizer": "char",
        "vocab_size": 20,
        "synthetic_train_size": 20000,
        "synthetic_val_size": 500,
    },
    "train": {
        "max_steps": 600,
        "batch_size": 64,
        "lr": 2e-3,
        "schedule": "cosine",
        "warmup_steps": 50,
        "eval_every": 200,
        "max_minutes": 1.5,
    },
}


def run_demo(out: Path, quiet: bool = False, overwrite: bool = False) -> dict[str, Any]:
    """Train (replacing the run in ``out`` with ``overwrite``), evaluate with real decoding
    on held-out strings, print examples, draw the cross-attention of one example. Returns
    the numbers it printed."""
    say = (lambda _: None) if quiet else print
    say("Training a small encoder-decoder to reverse strings of 3 to 12 digits ...")
    train(Recipe.from_dict(DEMO_RECIPE), out, quiet=quiet, overwrite=overwrite)
    task, model = load_run(out)

    held_out = task.read("test")
    sources = [source for source, _ in held_out]
    greedy = task.translate(model, sources, beam_size=1)
    exact = sum(h == target for h, (_, target) in zip(greedy, held_out, strict=True))
    accuracy = exact / len(held_out)
    say(
        f"\nExact match on {len(held_out)} held-out strings (greedy decoding) of the "
        f"{count_parameters(model):,}-parameter model: {accuracy:.1%}\n"
    )
    shown = sources[:5]
    beam = task.translate(model, shown, beam_size=4)
    say(f"{'input':<14} {'greedy':<14} {'beam 4':<14}")
    for source, g, b in zip(shown, greedy[: len(shown)], beam, strict=True):
        say(f"{source:<14} {g:<14} {b:<14}")

    picture = out / ATTENTION_PICTURE
    _draw_cross_attention(task, model, sources[0], greedy[0], picture)
    say(f"\nCross-attention of the last decoder layer for {sources[0]!r}: {picture}")
    say("(reversal shows as the anti-diagonal: output digit i looks at input digit n - i)")
    return {"exact_match": accuracy, "examples": len(held_out), "attention": str(picture)}


def _draw_cross_attention(
    task: Task, model: torch.nn.Module, source: str, output: str, path: Path
) -> None:
    maps = capture_attention(task, model, source, target=output)
    figure = attention_heatmap(
        maps.weights["cross"][-1].mean(0),  # last layer, averaged over heads
        queries=maps.queries["cross"],
        keys=maps.keys["cross"],
        title="cross-attention, last layer (mean of heads)",
    )
    save_figure(figure, path)
