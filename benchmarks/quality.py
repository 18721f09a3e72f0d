"""Quality within a budget: train each recipe for at most its wall-clock budget on this
machine, evaluate on the named split, and write ``results/<task>.json``.

    python benchmarks/quality.py                      # every row (hours: see the budgets)
    python benchmarks/quality.py --task copy --task shakespeare-char
    python benchmarks/results_table.py                # then regenerate the README's table

Each row runs two commands, recorded in its result so that anyone can repeat it:
``scratchformer train RECIPE --out runs/results/TASK --set train.max_minutes=BUDGET ...``
on a fresh run directory, then ``scratchformer eval runs/results/TASK --split SPLIT``.
Checkpoints are selected on the validation split only. A row that starts from another
row's run (``train.init_from``) records which: its recipe, steps and a hash of its weights
(``started_from``), so that the rows fine-tuned from one pretraining can be seen to share it.

The rows with an int8 tolerance are also evaluated with ``--quantize int8`` (int8 weights,
:func:`scratchformer.quantize`), once in each precision of products this CPU has:
``--precision fp32`` (on x86, products of a few rows in int8 x int8, each input row
quantized too) and, where bfloat16 is native, ``--precision auto`` (bfloat16 products);
the result says whether each stays within the tolerance of the fp32 model. ``--int8-only``
does just that for runs already trained, updating their results.

The rows of a language model and its chat fine-tunes (``pretrain-decoder``, ``chat-sft``,
``chat-dpo``) are also asked the requests of the source tasks' validation splits through
``scratchformer serve``'s ``/v1/chat/completions`` (``benchmarks/chat_quality.py``);
``--chat-only`` does just that for runs already trained.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import chat_quality
from scratchformer import __version__, count_parameters
from scratchformer.device import native_bf16
from scratchformer.io import atomic_write_text
from scratchformer.run import load_run
from workloads.machine import cpu_name

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
CAPTURE: dict[str, Any] = {"check": True, "stdout": subprocess.PIPE, "text": True, "cwd": ROOT}
"""How the commands run: from the project root, failing loudly, stdout (JSON) captured."""


@dataclass(frozen=True)
class Row:
    """One line of the results table: a recipe, its budget, the metric and its target."""

    task: str
    recipe: str
    metric: str
    """A key of ``scratchformer eval``'s JSON."""
    split: str
    budget_minutes: float
    target: float
    higher_is_better: bool = True
    required: bool = True
    """False for targets to aim at and report, not to meet."""
    settings: tuple[str, ...] = ()
    """``--set`` overrides of the recipe for this row."""
    int8_tolerance: float | None = None
    """How much worse the metric may get with int8 weights: an amount, or with
    ``int8_relative`` a fraction of the fp32 value."""
    int8_relative: bool = False
    chat: bool = False
    """Also ask the run through ``/v1/chat/completions`` (:mod:`chat_quality`)."""
    prepare: tuple[tuple[str, ...], ...] = ()
    """Commands run before training (making the row's data), recorded with the row's."""

    def met(self, value: float) -> bool:
        return value >= self.target if self.higher_is_better else value <= self.target

    def int8_met(self, fp32: float, int8: float) -> bool:
        """Whether ``int8`` is within the tolerance of ``fp32``."""
        assert self.int8_tolerance is not None
        allowed = self.int8_tolerance * (abs(fp32) if self.int8_relative else 1.0)
        worse = fp32 - int8 if self.higher_is_better else int8 - fp32
        return worse <= allowed


FROM_PRETRAINED = ("train.init_from=runs/results/pretrain-encoder",)
"""The fine-tunes of the pretrained rows start from the ``pretrain-encoder`` row's run."""
CHAT_DATA = "runs/results/chat-data"
"""The chat rows' conversations and preference pairs, made by ``make-chat-data``."""
MAKE_CHAT_DATA = ("make-chat-data", "--out", CHAT_DATA)
CHAT_LIMIT = 300
"""Requests of each kind that the chat rows are asked (the first of each validation split)."""

ROWS = {
    row.task: row
    for row in (
        Row("copy", "copy", "exact_match", "test", 2, 0.99),
        Row(
            "shakespeare-char",
            "shakespeare-char",
            "loss",
            "val",
            151 / 60,
            1.70,
            higher_is_better=False,
            int8_tolerance=0.01,
            int8_relative=True,
        ),
        Row(
            "shakespeare-llama",
            "shakespeare-llama",
            "loss",
            "val",
            151 / 60,
            1.70,
            higher_is_better=False,
            required=False,
        ),
        Row(
            "shakespeare-char-large",
            "shakespeare-char-large",
            "loss",
            "val",
            30,
            1.50,
            higher_is_better=False,
        ),
        Row(
            "multi30k-de-en",
            "multi30k-de-en",
            "bleu_tokenized_lc",
            "test",
            30,
            36.0,
            int8_tolerance=0.5,
        ),
        Row(
            "multi30k-en-de",
            "multi30k-en-de",
            "bleu_tokenized_lc",
            "test",
            30,
            38.0,
            required=False,
        ),
        Row("sst2", "sst2", "accuracy", "val", 15, 0.82, int8_tolerance=0.005),
        Row("conll2003", "conll2003", "entity_f1", "val", 20, 0.78),
        Row("stsb", "stsb", "pearson", "val", 15, 0.60, required=False),
        Row("sst2-minilm", "sst2-minilm", "accuracy", "val", 60, 0.905),
        Row("sst2-minilm-lora", "sst2-minilm-lora", "accuracy", "val", 60, 0.88, required=False),
        Row("conll2003-minilm", "conll2003-minilm", "entity_f1", "val", 60, 0.88),
        Row("stsb-minilm", "stsb-minilm", "pearson", "val", 30, 0.86),
        Row("squad-minilm", "squad-minilm", "f1", "val", 60, 65.0),
        Row("squad", "squad", "f1", "val", 30, 20.0, required=False),
        Row("pretrain-encoder", "pretrain-encoder", "accuracy", "val", 60, 0.3, required=False),
        Row(
            "pretrain-sentences",
            "pretrain-sentences",
            "loss",
            "val",
            10,
            0.01,  # the masked-LM encoder it starts from: 0.77
            higher_is_better=False,
            required=False,
            settings=FROM_PRETRAINED,
        ),
        *(
            Row(task, task, metric, "val", minutes, target, settings=settings)
            for task, metric, minutes, target, settings in (
                ("sst2-pretrained", "accuracy", 15, 0.835, FROM_PRETRAINED),
                ("stsb-pretrained", "pearson", 15, 0.77, FROM_PRETRAINED),
                ("conll2003-pretrained", "entity_f1", 20, 0.82, FROM_PRETRAINED),
                ("squad-pretrained", "f1", 30, 25.0, FROM_PRETRAINED),
            )
        ),
        Row(
            "pretrain-decoder",
            "pretrain-decoder",
            "loss",
            "val",
            30,
            3.0,
            higher_is_better=False,
            required=False,
            chat=True,
        ),
        Row(
            "chat-sft",
            "chat-sft",
            "loss",
            "val",
            15,
            1.0,
            higher_is_better=False,
            required=False,
            settings=(
                f"data.train={CHAT_DATA}/train.jsonl",
                f"data.val={CHAT_DATA}/val.jsonl",
                "train.init_from=runs/results/pretrain-decoder",
            ),
            chat=True,
            prepare=(MAKE_CHAT_DATA,),
        ),
        Row(
            "chat-dpo",
            "chat-dpo",
            "rewards/accuracies",
            "val",
            10,
            0.9,
            required=False,
            settings=(
                f"data.train={CHAT_DATA}/pairs-train.jsonl",
                f"data.val={CHAT_DATA}/pairs-val.jsonl",
                "train.init_from=runs/results/chat-sft",
            ),
            chat=True,
            prepare=(MAKE_CHAT_DATA,),
        ),
        Row("pretrain-t5", "pretrain-t5", "accuracy", "val", 30, 0.5, required=False),
        Row("pretrain-denoising", "pretrain-denoising", "accuracy", "val", 30, 0.6, required=False),
        Row(
            "multi30k-de-en-pretrained",
            "multi30k-de-en-pretrained",
            "bleu_tokenized_lc",
            "test",
            30,
            42.4,
            required=False,
            settings=("train.init_from=runs/results/pretrain-denoising",),
        ),
    )
}


def scratchformer(*args: str) -> list[str]:
    return [sys.executable, "-m", "scratchformer", "--quiet", *args]


def run_row(row: Row, threads: int, runs: Path) -> dict[str, Any]:
    """Train and evaluate one row; its result as written to ``results/<task>.json``."""
    run_dir = runs / row.task  # relative paths are taken from the project root
    shutil.rmtree(ROOT / run_dir, ignore_errors=True)
    settings = [f"train.max_minutes={row.budget_minutes:.4g}", f"train.threads={threads}"]
    settings += row.settings
    train = ["train", f"recipes/{row.recipe}.toml", "--out", str(run_dir)]
    for setting in settings:
        train += ["--set", setting]
    evaluate = ["eval", str(run_dir), "--split", row.split]

    commands = [*map(list, row.prepare), train, evaluate]
    for command in row.prepare:
        subprocess.run(scratchformer(*command), **CAPTURE)

    started = time.perf_counter()
    trained = json.loads(subprocess.run(scratchformer(*train), **CAPTURE).stdout)
    wall = time.perf_counter() - started
    metrics = json.loads(subprocess.run(scratchformer(*evaluate), **CAPTURE).stdout)
    value = float(metrics[row.metric])
    config = json.loads((ROOT / run_dir / "config.json").read_text())
    result = {
        "task": row.task,
        "metric": row.metric,
        "split": row.split,
        "value": value,
        "target": row.target,
        "higher_is_better": row.higher_is_better,
        "required": row.required,
        "met": row.met(value),
        "budget_seconds": round(row.budget_minutes * 60),
        "wall_seconds": round(wall, 1),
        "train_seconds": round(trained["train_seconds"], 1),
        "precision": trained["precision"],
        "steps": trained["step"],
        "best_step": trained["best_step"],
        **parameters(ROOT / run_dir),
        "metrics": metrics,
        "weights_sha256": weights_sha256(ROOT / run_dir),
        "hardware": hardware(threads),
        "versions": versions(),
        "seed": config["train"]["seed"],
        "command": " && ".join(shlex.join(["scratchformer", *c]) for c in commands),
    }
    start = started_from(config["train"]["init_from"])
    if start is not None:
        result["started_from"] = start
    if row.chat:
        result["chat"] = chat_quality.measure(ROOT / run_dir, CHAT_LIMIT, threads=threads)
    if row.int8_tolerance is not None:
        result["int8"] = int8_results(row, run_dir, value)
    return result


def weights_sha256(run_dir: Path) -> str:
    """A hash of the run's weights (``model.safetensors``): what a fine-tune that starts
    from the run records, and the run's own row too, so that the two can be matched."""
    return hashlib.sha256((run_dir / "model.safetensors").read_bytes()).hexdigest()


def started_from(init_from: str | None) -> dict[str, Any] | None:
    """The run of ours a fine-tune started from (its ``train.init_from``; None for none or a
    Hugging Face checkpoint), so that rows can be told to share one: its directory, its
    recipe, the steps it trained and the best of them, a hash of the weights it gave, and
    the CPU of its own result, if any."""
    run_dir = None if init_from is None else ROOT / init_from
    if run_dir is None or not (run_dir / "trainer_state.json").is_file():
        return None
    state = json.loads((run_dir / "trainer_state.json").read_text())
    result = RESULTS / f"{run_dir.name}.json"
    return {
        "run": init_from,
        "recipe": ROWS[run_dir.name].recipe if run_dir.name in ROWS else None,
        "steps": state["step"],
        "best_step": state["best_step"],
        "weights_sha256": weights_sha256(run_dir),
        "hardware": json.loads(result.read_text())["hardware"] if result.exists() else None,
    }


def int8_results(row: Row, run_dir: Path, fp32: float) -> list[dict[str, Any]]:
    """The row's metric with the run's weights in int8, against ``fp32``, its value with
    the weights as trained: with float32 products (int8 x int8 where the kernel runs), and
    with bfloat16 products where they are native."""
    precisions = ["fp32", "bf16"] if native_bf16(torch.device("cpu")) else ["fp32"]
    return [int8_result(row, run_dir, fp32, precision) for precision in precisions]


def int8_result(row: Row, run_dir: Path, fp32: float, precision: str) -> dict[str, Any]:
    """:func:`int8_results`' entry of products in ``precision``."""
    evaluate = ["eval", str(run_dir), "--split", row.split, "--quantize", "int8"]
    evaluate += ["--precision", precision]
    metrics = json.loads(subprocess.run(scratchformer(*evaluate), **CAPTURE).stdout)
    value = float(metrics[row.metric])
    return {
        "value": value,
        "precision": precision,
        "fp32": fp32,
        "tolerance": row.int8_tolerance,
        "relative": row.int8_relative,
        "met": row.int8_met(fp32, value),
        "metrics": metrics,
        "command": shlex.join(["scratchformer", *evaluate]),
    }


def updated(path: Path, **measured: Any) -> dict[str, Any]:
    """The result in ``path`` with the entries ``measured`` again, written back: for a run
    already trained."""
    result = {**json.loads(path.read_text()), **measured}
    atomic_write_text(path, json.dumps(result, indent=2) + "\n")
    return result


def parameters(run_dir: Path) -> dict[str, int]:
    """The run's parameters, and those it trained (fewer for LoRA: the adapters and head)."""
    _, model = load_run(run_dir)
    return {
        "params": count_parameters(model),
        "trained_params": count_parameters(model, trainable_only=True),
    }


def hardware(threads: int) -> dict[str, Any]:
    return {
        "cpu": cpu_name(),
        "isa": torch.backends.cpu.get_cpu_capability(),  # AVX2, AVX512: CPUs of a name differ
        "native_bf16": native_bf16(torch.device("cpu")),
        "cores": os.cpu_count(),
        "threads": threads,
        "device": "cpu",
    }


def versions() -> dict[str, str]:
    return {
        "scratchformer": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--task", action="append", choices=list(ROWS), help="a row to run (repeatable)"
    )
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (default: 2)")
    parser.add_argument("--runs", type=Path, default=Path("runs/results"))
    parser.add_argument(
        "--int8-only",
        action="store_true",
        help="only evaluate the trained runs with int8 weights, updating their results",
    )
    parser.add_argument(
        "--chat-only",
        action="store_true",
        help="only ask the trained chat rows' runs through the server, updating their results",
    )
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    for name in args.task or list(ROWS):
        row = ROWS[name]
        path = RESULTS / f"{name}.json"
        run_dir = args.runs / name
        if args.chat_only:
            if row.chat:
                updated(
                    path,
                    chat=chat_quality.measure(ROOT / run_dir, CHAT_LIMIT, threads=args.threads),
                )
                print(f"{name}: asked through the server -> {path}")
            continue
        if args.int8_only:
            if row.int8_tolerance is not None:
                fp32 = json.loads(path.read_text())["value"]
                result = updated(path, int8=int8_results(row, run_dir, fp32))
                int8 = ", ".join(f"{r['value']:.4g} ({r['precision']})" for r in result["int8"])
                print(f"{name}: int8 {int8}, fp32 {fp32:.4g}")
            continue
        print(f"{name}: training for at most {row.budget_minutes:.3g} min ...", flush=True)
        result = run_row(row, args.threads, args.runs)
        atomic_write_text(path, json.dumps(result, indent=2) + "\n")
        verdict = "met" if result["met"] else "missed"
        print(
            f"{name}: {row.metric} on {row.split} = {result['value']:.4g} "
            f"(target {row.target:g}, {verdict}) in {result['wall_seconds']:.0f} s -> {path}"
        )


if __name__ == "__main__":
    main()
