"""Settings, figures, targets and rows of the benchmark; printing them and saving them as JSON."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers

from timing import Timing, load_warning
from workloads.machine import Machine

OURS, TORCH = "ours", "torch.nn"
COMPILED = "ours, compiled"
"""Ours through ``torch.compile`` (``train.compile``; ``CompiledModel`` for decoding); its
first step or warm-up includes compiling."""
BF16_COMPILED = "ours, bf16 compiled"
"""Ours through ``CompiledModel`` under bfloat16 autocast, on a CPU with native bfloat16."""
INT8_COMPILED = "ours, int8 compiled"
"""Ours with int8 weights (``scratchformer.inference.quantize``) through ``CompiledModel``,
under bfloat16 autocast on a CPU with native bfloat16 (the form that compiles to an int8
kernel), in fp32 elsewhere."""
EXPORTED = "ours, exported"
"""Ours through ``ExportedLM``: its one-token decoding step compiled ahead of time by
AOTInductor (no Dynamo, no Python between kernels); its warm-up includes compiling."""
INT8_EXPORTED = "ours, int8 exported"
"""Ours with int8 weights through ``ExportedLM``, in bfloat16 autocast where it is native
(as ``INT8_COMPILED``)."""
INT8_EXPORTED_FP32 = "ours, int8 exported fp32"
"""Ours with int8 weights through ``ExportedLM`` in fp32 (on x86: int8 x int8 products,
``scratchformer.kernels.int8_matmul``), run on a CPU with native bfloat16 only, beside
``INT8_EXPORTED``'s bf16: the form of every CPU without it, on the same machine."""
INT8 = "ours, int8"
"""Ours with int8 weights, eager, as the CLI's ``--quantize int8 --precision auto`` runs it:
under bfloat16 autocast on a CPU with native bfloat16, in fp32 elsewhere."""
TRAINER_ADAMW = "ours, fused AdamW"
"""Ours stepped by the trainer's optimizer, torch's fused AdamW; every other candidate runs
``torch.optim.AdamW`` with its defaults (a loop over parameters on CPU)."""
BF16 = "ours, bf16"
"""Ours stepped by the trainer's optimizer in bfloat16 autocast (``train.precision =
"bf16"``), timed only on a CPU with native bfloat16; held against the bf16 matmul peak."""
GPT2, MARIAN = "HF GPT-2", "HF Marian"
LLAMA_F32, LLAMA_Q8 = "llama.cpp f32", "llama.cpp q8_0"
"""The same model's GGUF file in llama.cpp (``llama-cpp-python``), weights in f32 and in
q8_0 (int8 in blocks of 32, a scale each)."""
IN_BF16 = (BF16, BF16_COMPILED)
"""Our candidates that always compute in bfloat16 autocast."""
IN_BF16_WHERE_NATIVE = (INT8, INT8_COMPILED, INT8_EXPORTED)
"""Our candidates that compute in bfloat16 autocast on a CPU with native bfloat16 only."""
NOISY_SPREAD = 0.20
QUICK_NEW_TOKENS = 32


@dataclass(frozen=True)
class Settings:
    threads: int
    quick: bool
    repeats: int | None
    """``--repeats``; None: each workload's own default."""
    machine: Machine | None = None
    """The machine's limits (not measured in a memory child)."""
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


def precision_of(candidate: str, native_bf16: bool) -> str:
    """The precision ``candidate`` computes in, whose matmul peak its figure is held
    against: ``bf16`` or ``fp32`` (``native_bf16``: whether this CPU has it natively)."""
    native = native_bf16 and candidate in IN_BF16_WHERE_NATIVE
    return "bf16" if candidate in IN_BF16 or native else "fp32"


@dataclass(frozen=True)
class Figure:
    """One candidate's figure in one case: a rate (``timing`` holds its runs) or MiB."""

    candidate: str
    value: float
    unit: str
    timing: Timing | None = None
    gflops: float | None = None
    """Achieved GFLOP/s, for the rows that count FLOPs."""
    gbytes_per_s: float | None = None
    """Achieved GB/s of memory read, for the rows that count bytes (decoding)."""
    note: str = ""
    precision: str = "fp32"
    """Whose matmul peak the figure is held against: ``fp32`` or ``bf16``."""

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
            "gbyte_per_s": self.gbytes_per_s,
            "precision": self.precision,
            "note": self.note,
        }


@dataclass(frozen=True)
class Target:
    """Ours / ``against`` must be at least ``bound`` (a rate) or at most (memory)."""

    against: str
    bound: float
    higher_is_better: bool = True
    of: str | None = None
    """The candidate the target is for; None: ours and every variant."""

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
    machine: Machine | None = None
    """The machine's limits, for the rows that count FLOPs or bytes."""
    remark: str = ""
    limit_target: float | None = None
    """The fraction of the machine's limit ours and every variant should reach."""

    def __post_init__(self) -> None:
        ran = {figure.candidate for figure in self.figures}
        missing = [name for name in (self.ours, *self.variants) if name not in ran]
        if missing:  # (a candidate not run on this machine is no variant of its row)
            raise ValueError(f"{self.title}: no figure of {', '.join(missing)}")

    @property
    def title(self) -> str:
        return f"{self.workload} {self.case}".strip()

    def figure(self, candidate: str) -> Figure:
        return next(f for f in self.figures if f.candidate == candidate)

    def ratio(self, target: Target, ours: str | None = None) -> float:
        """Ours (or the variant ``ours``) / the candidate of ``target``."""
        theirs = self.figure(target.against).value
        return self.figure(ours or self.ours).value / theirs if theirs else math.inf

    def limit_fraction(self, figure: Figure) -> float | None:
        """The fraction of the machine's limit that ``figure`` reaches (see ``machine.py``),
        None where nothing is counted."""
        if self.machine is None or (figure.gflops is None and figure.gbytes_per_s is None):
            return None
        return self.machine.fraction(figure.gflops, figure.gbytes_per_s, figure.precision)

    def limit_met(self, candidate: str) -> bool | None:
        """Whether ``candidate`` reaches the row's ``limit_target`` (None: no such target)."""
        fraction = self.limit_fraction(self.figure(candidate))
        if self.limit_target is None or fraction is None:
            return None
        return fraction >= self.limit_target

    def targets_of(self, candidate: str) -> list[Target]:
        """The targets ``candidate`` (ours or a variant) must meet."""
        return [t for t in self.targets if t.of in (None, candidate)]

    def target_for(self, candidate: str) -> Target | None:
        """Ours' target against ``candidate``, if any."""
        return next((t for t in self.targets_of(self.ours) if t.against == candidate), None)

    def to_json(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "case": self.case,
            "description": self.description,
            "ours": self.ours,
            "figures": [
                {**f.to_json(), "limit_fraction": self.limit_fraction(f)} for f in self.figures
            ],
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
                for t in self.targets_of(ours)
            ],
            "remark": self.remark,
            "limit_target": self.limit_target,
        }


def print_header(settings: Settings, workloads: list[str]) -> None:
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads, fp32, CPU only (GPU figures are not measured here)"
    )
    print(f"workloads: {', '.join(workloads)}")
    if settings.machine is not None:
        print(f"limits: {settings.machine.describe()}")
    print(
        "each workload in a fresh process; median of interleaved runs after a warm-up; "
        "spread = IQR / median (range / median under 4 runs); "
        "ratio = ours / this candidate (MiB for memory); "
        "limit = max(GFLOP/s / matmul peak, GB/s / memory bandwidth)"
    )
    if settings.quick:
        print("QUICK mode: a check that everything runs, not figures to quote")
    warning = load_warning()
    if warning is not None:
        print(warning)


def print_row(row: Row) -> None:
    """The case's title, then a line per candidate: its figure, the achieved GFLOP/s or
    GB/s and the fraction of the machine's limit (rows that count them), the spread (timed
    rows), the ratio ours / this candidate with the target, and a note on the work it did."""
    print(f"\n{row.title}: {row.description}")
    counted = any(row.limit_fraction(f) is not None for f in row.figures)
    timed = any(f.timing is not None for f in row.figures)
    width = max(16, *(len(f.candidate) for f in row.figures))
    header = f"  {'candidate':<{width}} {row.figures[0].unit:>12}"
    header += f" {'GFLOP/s':>8} {'GB/s':>6} {'limit':>6}" if counted else ""
    header += f" {'spread':>7}" if timed else ""
    print(f"{header} {'ratio':>7}  {'target':<8} {'':<6}  note")
    for f in row.figures:
        line = f"  {f.candidate:<{width}} {f.value:>12,.1f}"
        if counted:
            fraction = row.limit_fraction(f)
            line += f" {f.gflops:>8.1f}" if f.gflops is not None else f" {'-':>8}"
            line += f" {f.gbytes_per_s:>6.1f}" if f.gbytes_per_s is not None else f" {'-':>6}"
            line += f" {fraction:>6.1%}" if fraction is not None else f" {'-':>6}"
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
        for t in row.targets_of(variant):
            ratio = row.ratio(t, variant)
            ratios.append(f"{ratio:.2f}x {t.against} ({t} {'ok' if t.met(ratio) else 'MISSED'})")
        print(f"  {variant}: {', '.join(ratios)}")
    if row.limit_target is not None:
        reached = [
            f"{name} {row.limit_fraction(row.figure(name)):.1%} "
            f"({'ok' if row.limit_met(name) else 'MISSED'})"
            for name in (row.ours, *row.variants)
        ]
        print(f"  limit target >= {row.limit_target:.0%}: {', '.join(reached)}")
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
            for t in row.targets_of(variant or row.ours)
        ]
        missed = [(row, t, ratio) for row, t, ratio in results if not t.met(ratio)]
        if results:
            print(f"\ntargets of {name}: {len(results) - len(missed)} of {len(results)} met")
        for row, t, ratio in missed:
            print(f"  MISSED {row.title}: {name} / {t.against} {ratio:.2f}x, target {t}")
    limits = [(row, name) for row in rows for name in (row.ours, *row.variants)]
    limits = [(row, name) for row, name in limits if row.limit_met(name) is not None]
    if limits:
        met = sum(bool(row.limit_met(name)) for row, name in limits)
        print(f"\nlimit targets: {met} of {len(limits)} met")
    for row, name in limits:
        if not row.limit_met(name):
            fraction = row.limit_fraction(row.figure(name))
            print(
                f"  MISSED {row.title}: {name} at {fraction:.1%} of the limit, target "
                f">= {row.limit_target:.0%}"
            )
    spreads = [f.spread for row in rows for f in row.figures if f.spread is not None]
    if any(spread > NOISY_SPREAD for spread in spreads):
        print(f"note: spread above {NOISY_SPREAD:.0%}, the machine was busy; rerun when it is idle")


def write_json(path: Path, settings: Settings, rows: list[Row]) -> None:
    result = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "quick": settings.quick,
        "machine": asdict(settings.machine) if settings.machine is not None else None,
        "rows": [row.to_json() for row in rows],
    }
    path.write_text(json.dumps(result, indent=2) + "\n")
