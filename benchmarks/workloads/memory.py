"""The ``memory`` workload: peak resident memory, each candidate in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

import generate as gen
from timing import Step
from workloads.lm_train import LM_SHAPES, lm_batch, lm_candidate
from workloads.report import GPT2, OURS, TORCH, Figure, Row, Settings, Target, print_row
from workloads.training import seeded, training_step

SCRIPT = str(Path(__file__).resolve().parents[1] / "speed.py")
"""The benchmark's entry point, which runs a child with ``--memory-child``."""


def max_rss_mib() -> float:
    """The peak resident memory of this process so far: Linux's ``VmHWM``. Not
    ``getrusage``'s ``ru_maxrss``, which keeps the peak of the parent that forked the child,
    the whole benchmark with its models, across ``exec``."""
    status = Path("/proc/self/status").read_text()
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(kib) / 1024


def lm_train_b_step(name: str, settings: Settings) -> Step:
    """A training step of candidate ``name`` at size B, on its batch."""
    shape = LM_SHAPES["B"]
    return training_step(lm_candidate(name, shape), *lm_batch(shape))


def generation_step(name: str, settings: Settings) -> Step:
    """A checked greedy generation by candidate ``name`` of ``benchmarks/generate.py`` at
    batch 8."""
    batch = 8
    prompts = torch.randint(1, gen.VOCAB, (batch, gen.PROMPT_LEN), generator=seeded())
    run = (
        gen.ours(gen.our_model(), prompts, use_cache=True)
        if name == gen.CACHED
        else gen.hugging_face(gen.hf_model(), prompts)
    )
    return partial(gen.checked_run, gen.Candidate(name, run, 1), settings.new_tokens, batch)


@dataclass(frozen=True)
class MemoryCase:
    candidates: tuple[str, ...]
    """Ours first."""
    runs: str
    """What a run is, for the description."""
    build: Callable[[str, Settings], Step]
    """The run of a candidate, its model and inputs built."""


MEMORY_CASES = {
    "lm-train B": MemoryCase((OURS, TORCH, GPT2), "training steps", lm_train_b_step),
    "generate batch 8": MemoryCase((gen.CACHED, gen.HF), "generations", generation_step),
}


def memory_child(spec: str, settings: Settings) -> dict[str, float]:
    """In a fresh process: build candidate ``spec`` (``case/candidate``) and its inputs,
    note the peak memory, run it ``settings.memory_runs`` times, note the peak again."""
    case, name = spec.split("/", 1)
    torch.manual_seed(0)
    step = MEMORY_CASES[case].build(name, settings)
    baseline = max_rss_mib()
    for _ in range(settings.memory_runs):
        step()
    return {"baseline_mib": baseline, "peak_mib": max_rss_mib()}


def measured_in_child(spec: str, settings: Settings) -> dict[str, float]:
    """Run :func:`memory_child` in a fresh interpreter; its last line of output is JSON."""
    command = [sys.executable, SCRIPT, "--memory-child", spec, "--threads", str(settings.threads)]
    if settings.quick:
        command.append("--quick")
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.splitlines()[-1])


def memory(settings: Settings) -> list[Row]:
    rows = []
    for case, spec in MEMORY_CASES.items():
        figures = []
        for name in spec.candidates:
            child = measured_in_child(f"{case}/{name}", settings)
            growth = child["peak_mib"] - child["baseline_mib"]
            note = f"total peak {child['peak_mib']:,.0f} MiB, {child['baseline_mib']:,.0f} before"
            figures.append(Figure(name, growth, "MiB", note=note))
        description = (
            f"max RSS growth over {settings.memory_runs} {spec.runs}, each candidate in a "
            "fresh process (peak after the runs minus peak after imports, model and inputs)"
        )
        ours, *others = spec.candidates
        targets = [Target(name, 1.0, higher_is_better=False) for name in others]
        rows.append(Row("memory", case, description, figures, targets, ours=ours))
        print_row(rows[-1])
    return rows
