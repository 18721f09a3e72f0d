"""Timing shared by the speed benchmarks: candidates run in turn, medians and spreads.

Every benchmark compares candidates in one process. After a warm-up, repetitions alternate
the candidates (A, B, C, A, B, C, ...) so that drift in machine speed (other work, clock
changes) hits them alike; each call is timed alone, and the median of a candidate's calls
is its figure. The spread says how far the figure can be trusted.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Step = Callable[[], Any]
"""One timed unit of work (a training step, a whole generation...); may return a result."""


@dataclass
class Timing:
    """The timed calls of one candidate, in seconds, and what its last call returned."""

    samples_s: list[float] = field(default_factory=list)
    last: Any = None

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def iqr_spread(self) -> float:
        """Interquartile range relative to the median (needs 2 samples or more)."""
        q1, _, q3 = statistics.quantiles(self.samples_s, n=4)
        return (q3 - q1) / self.median_s

    @property
    def range_spread(self) -> float:
        """Range relative to the median: for a handful of samples, where quartiles mean
        little."""
        return (max(self.samples_s) - min(self.samples_s)) / self.median_s


def timed(step: Step) -> tuple[float, Any]:
    """Seconds taken by one call of ``step``, and what it returned."""
    start = time.perf_counter()
    result = step()
    return time.perf_counter() - start, result


def interleaved(
    steps: Sequence[Step], repeats: int | Sequence[int], warmup: int = 0
) -> list[Timing]:
    """The timings of ``steps``: ``warmup`` untimed rounds (every step once, in turn), then
    timed rounds in turn, each step until it has its number of ``repeats`` (one number for
    all, or one per step: slow candidates may run fewer times)."""
    counts = [repeats] * len(steps) if isinstance(repeats, int) else list(repeats)
    for _ in range(warmup):
        for step in steps:
            step()
    gc.collect()
    timings = [Timing() for _ in steps]
    for round_ in range(max(counts, default=0)):
        for step, count, timing in zip(steps, counts, timings, strict=True):
            if round_ < count:
                seconds, timing.last = timed(step)
                timing.samples_s.append(seconds)
    return timings


def load_warning(threshold: float = 0.5) -> str | None:
    """A warning if the 1-minute load average says other work competes for the CPU."""
    load = os.getloadavg()[0]
    if load <= threshold:
        return None
    return f"warning: load average {load:.2f} before the start; other work competes for the CPU"


def repeats_and_threads(description: str, repeats: int, what: str) -> argparse.Namespace:
    """The command line of a benchmark of two candidates: ``--repeats`` (timed ``what`` per
    candidate, ``repeats`` by default) and ``--threads``, checked."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=repeats, help=f"timed {what} per candidate")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    args = parser.parse_args()
    if args.repeats < 3 or args.threads < 1:
        parser.error("need --repeats >= 3 and --threads >= 1")
    return args
