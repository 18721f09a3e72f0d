"""Settings, figures, targets and rows of the benchmark; printing them and saving them as JSON."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers

from timing import Timing, load_warning
from workloads.flops import PEAK_SIZE

OURS, TORCH = "ours", "torch.nn"
COMPILED = "ours, compiled"
"""Ours through ``torch.compile`` (``train.compile``; ``CompiledLM`` for generation); its
first step or warm-up includes compiling."""
TRAINER_ADAMW = "ours, fused AdamW"
"""Ours stepped by the trainer's optimizer, torch's fused AdamW; every other candidate runs
``torch.optim.AdamW`` with its defaults (a loop over parameters on CPU)."""
GPT2, MARIAN = "HF GPT-2", "HF Marian"
NOISY_SPREAD = 0.20
QUICK_NEW_TOKENS = 32


@dataclass(frozen=True)
class Settings:
    threads: int
    quick: bool
    repeats: int | None
    """``--repeats``; None: each workload's own default."""
    peak_gflops: float | None = None
    """The machine's fp32 matmul peak (not measured in a memory child)."""
    compile: bool = True
    """Also time ours through ``torch.compile`` in the training and generation workloads."""

    def repeats_or(self, default: int, quick: int) -> int:
        """``--repeats`` if given, else the workload's default (``quick`` under --quick)."""
        if self.repeats is not None:
            return self.repeats
        return quick if self.quick else default

    @property
    def warmup(self) -> int:
        return 1 if self.quick else 2

    @property
    def memory_runs(self) -> int:
        return 2 if self.quick else 3

    @property
    def new_tokens(self) -> int:
        return QUICK_NEW_TOKENS if self.quick else 256


@dataclass(frozen=True)
class Figure:
    """One candidate's figure in one case: a rate (``timing`` holds its runs) or MiB."""

    candidate: str
    value: float
    unit: str
    timing: Timing | None = None
    gflops: float | None = None
    note: str = ""

    @property
    def spread(self) -> float | None:
        """How noisy the runs were: interquartile range / median from 4 runs, range /
        median below; None for a single run or a memory figure."""
        if self.timing is None or len(self.timing.samples_s) < 2:
            return None
        if len(self.timing.samples_s) < 4:
            return self.timing.range_spread
        return self.timing.iqr_spread

    def to_json(self) -> dict[str, object]:
        timed = {}
        if self.timing is not None:
            timed = {"median_s": self.timing.median_s, "samples_s": self.timing.samples_s}
        return {
            "candidate": self.candidate,
            "value": self.value,
            "unit": self.unit,
            **timed,
            "spread": self.spread,
            "gflop_per_s": self.gflops,
            "note": self.note,
        }


@dataclass(frozen=True)
class Target:
    """Ours / ``against`` must be at least ``bound`` (a rate) or at most (memory)."""

    against: str
    bound: float
    higher_is_better: bool = True

    def met(self, ratio: float) -> bool:
        return ratio >= self.bound if self.higher_is_better else ratio <= self.bound

    def __str__(self) -> str:
        return f"{'>=' if self.higher_is_better else '<='} {self.bound:.2f}x"


@dataclass(frozen=True)
class Row:
    """One case of a workload: the figure of every candidate, and the targets of ours."""

    workload: str
    case: str
    description: str
    figures: list[Figure]
    targets: list[Target]
    ours: str = OURS
    variants: tuple[str, ...] = ()
    """Other ways of running ours (compiled): their ratios are printed and kept too."""
    peak_gflops: float | None = None
    """The machine's matmul peak, for the rows that count FLOPs."""
    remark: str = ""

    @property
    def title(self) -> str:
        return f"{self.workload} {self.case}".strip()

    def figure(self, candidate: str) -> Figure:
        return next(f for f in self.figures if f.candidate == candidate)

    def ratio(self, target: Target, ours: str | None = None) -> float:
        """Ours (or the variant ``ours``) / the candidate of ``target``."""
        theirs = self.figure(target.against).value
        return self.figure(ours or self.ours).value / theirs if theirs else math.inf

    def target_for(self, candidate: str) -> Target | None:
        return next((t for t in self.targets if t.against == candidate), None)

    def to_json(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "case": self.case,
            "description": self.description,
            "ours": self.ours,
            "figures": [f.to_json() for f in self.figures],
            "variants": list(self.variants),
            "comparisons": [
                {
                    "ours": ours,
                    "against": t.against,
                    "ratio": self.ratio(t, ours),
                    "target": t.bound,
                    "higher_is_better": t.higher_is_better,
                    "met": t.met(self.ratio(t, ours)),
                }
                for ours in (self.ours, *self.variants)
                for t in self.targets
            ],
            "matmul_peak_gflop_per_s": self.peak_gflops,
            "remark": self.remark,
        }


def print_header(settings: Settings, workloads: list[str]) -> None:
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads, fp32, CPU only (GPU figures are not measured here)"
    )
    print(
        f"workloads: {', '.join(workloads)}; fp32 matmul peak {settings.peak_gflops:.1f} "
        f"GFLOP/s (fastest {PEAK_SIZE}x{PEAK_SIZE} torch.mm)"
    )
    print(
        "each workload in a fresh process; median of interleaved runs after a warm-up; "
        "spread = IQR / median (range / median under 4 runs); "
        "ratio = ours / this candidate (MiB for memory)"
    )
    if settings.quick:
        print("QUICK mode: a check that everything runs, not figures to quote")
    warning = load_warning()
    if warning is not None:
        print(warning)


def print_row(row: Row) -> None:
    """The case's title, then a line per candidate: its figure, the achieved GFLOP/s and
    share of the matmul peak (rows that count FLOPs), the spread (timed rows), the ratio
    ours / this candidate with the target, and a note on the work it did."""
    print(f"\n{row.title}: {row.description}")
    counts_flops = row.peak_gflops is not None
    timed = any(f.timing is not None for f in row.figures)
    header = f"  {'candidate':<16} {row.figures[0].unit:>12}"
    header += f" {'GFLOP/s':>8} {'of peak':>8}" if counts_flops else ""
    header += f" {'spread':>7}" if timed else ""
    print(f"{header} {'ratio':>7}  {'target':<8} {'':<6}  note")
    for f in row.figures:
        line = f"  {f.candidate:<16} {f.value:>12,.1f}"
        if f.gflops is not None and row.peak_gflops is not None:
            line += f" {f.gflops:>8.1f} {f.gflops / row.peak_gflops:>8.1%}"
        if timed:
            line += f" {f.spread:>7.1%}" if f.spread is not None else f" {'-':>7}"
        target = row.target_for(f.candidate)
        if target is None:
            line += f" {'':>7}  {'':<8} {'':<6}"
        else:
            ratio = row.ratio(target)
            line += f" {ratio:>6.2f}x  {target!s:<8} {'ok' if target.met(ratio) else 'MISSED':<6}"
        print(f"{line}  {f.note}")
    for variant in row.variants:
        ratios = []
        for t in row.targets:
            ratio = row.ratio(t, variant)
            ratios.append(f"{ratio:.2f}x {t.against} ({t} {'ok' if t.met(ratio) else 'MISSED'})")
        print(f"  {variant}: {', '.join(ratios)}")
    if row.remark:
        print(f"  {row.remark}")


def print_summary(rows: list[Row]) -> None:
    """Which targets were met, which missed, and whether the figures were noisy."""
    variants = dict.fromkeys(variant for row in rows for variant in row.variants)
    for variant in (None, *variants):
        name = variant or OURS
        results = [
            (row, t, row.ratio(t, variant))
            for row in rows
            if variant is None or variant in row.variants
            for t in row.targets
        ]
        missed = [(row, t, ratio) for row, t, ratio in results if not t.met(ratio)]
        if results:
            print(f"\ntargets of {name}: {len(results) - len(missed)} of {len(results)} met")
        for row, t, ratio in missed:
            print(f"  MISSED {row.title}: {name} / {t.against} {ratio:.2f}x, target {t}")
    spreads = [f.spread for row in rows for f in row.figures if f.spread is not None]
    if any(spread > NOISY_SPREAD for spread in spreads):
        print(f"note: spread above {NOISY_SPREAD:.0%}, the machine was busy; rerun when it is idle")


def write_json(path: Path, settings: Settings, rows: list[Row]) -> None:
    result = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "quick": settings.quick,
        "matmul_peak_gflop_per_s": settings.peak_gflops,
        "rows": [row.to_json() for row in rows],
    }
    path.write_text(json.dumps(result, indent=2) + "\n")
