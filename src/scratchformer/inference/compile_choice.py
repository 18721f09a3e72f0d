"""Whether a command compiles its model: ``--compile`` always, ``--no-compile`` never, and
by default ("auto") only when the job is large enough to repay the compilation here.

Compiling costs a fixed time (minutes the first time a model is compiled on a machine,
seconds once Inductor holds its code, see :func:`~scratchformer.caches.compiled_code_dir`), and then
every step of the job is faster. So it pays when ``compile + eager / speedup < eager``,
``eager`` being the job's time without compiling. All three are measured on this machine,
for this model under this command and these settings, and kept in a ledger beside the
compiled code (``scratchformer-costs.json``): every run of a command records what it
measured, the eager or the compiled seconds per unit of work and the seconds spent
compiling (cold, or warm when Inductor's cache had every graph). A job is
counted in its command's units (translation: source characters; generation: new tokens;
an encoder's tasks: input characters), so that one job's measurement estimates the next.

Until a figure is measured, the choice leans to eager: a model never run here has no eager
rate, so it runs eagerly (and its rate is recorded); an unmeasured compilation is taken to
cost :data:`UNMEASURED_COMPILE_SECONDS` and an unmeasured speed-up to be
:data:`UNMEASURED_SPEEDUP`. Deleting the compiled code deletes the ledger with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..caches import compiled_code_dir
from ..io import atomic_write_json

CHOICES = ("auto", "always", "never")
"""``--compile`` gives "always", ``--no-compile`` "never"; "auto" is the default."""
UNMEASURED_COMPILE_SECONDS = 300.0
"""The seconds a compilation not yet measured here is taken to cost: at least a cold one's
(docs/lab-notes.md, "Compiling a user's job")."""
UNMEASURED_SPEEDUP = 1.5
"""Compiled steps over eager ones, until measured: about what translation and generation
gain on a 2-core CPU (docs/performance.md)."""
LEDGER = "scratchformer-costs.json"


@dataclass
class Costs:
    """What was measured of one model, command and settings on this machine (seconds)."""

    eager_per_unit: float | None = None
    compiled_per_unit: float | None = None
    compile_cold: float | None = None
    compile_warm: float | None = None
    last_units: float | None = None
    """The units of the last job: what a server did over its life, the estimate of the next
    server's work, which no request tells ahead."""


@dataclass(frozen=True)
class Choice:
    """The decision for one job, and the figures it rests on."""

    compile: bool
    reason: str
    key: str
    units: float


def job_key(model: nn.Module, command: str, **settings: Any) -> str:
    """What a measurement depends on: the model (configuration, module types, dtype,
    device), the command and its settings, autocast, threads and torch's version."""
    config = getattr(model, "config", None)
    parameter = next(model.parameters(), None)
    described = {
        "command": command,
        "settings": settings,
        "config": dataclasses.asdict(config) if dataclasses.is_dataclass(config) else None,
        "modules": sorted({type(m).__name__ for m in model.modules()}),
        "dtype": str(parameter.dtype) if parameter is not None else None,
        "device": str(parameter.device.type) if parameter is not None else None,
        "autocast": torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    text = json.dumps(described, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ledger_path() -> Path:
    """The ledger, beside the compiled code it describes."""
    return compiled_code_dir() / LEDGER


def read_ledger() -> dict[str, Costs]:
    """Every measurement kept; an unreadable ledger counts as empty (it is only advice)."""
    try:
        raw = json.loads(ledger_path().read_text())
        return {key: Costs(**value) for key, value in raw.items()}
    except (OSError, ValueError, TypeError):
        return {}


def remember(key: str, **figures: float) -> None:
    """Record ``figures`` (fields of :class:`Costs`) of ``key``, over what was there."""
    ledger = read_ledger()
    ledger[key] = dataclasses.replace(ledger.get(key, Costs()), **figures)
    path = ledger_path()
    with suppress(OSError):  # a cache that cannot be written only loses the advice
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {k: dataclasses.asdict(v) for k, v in ledger.items()})


def last_units(key: str) -> float:
    """The units of the last job of ``key`` measured here (0 if none)."""
    return read_ledger().get(key, Costs()).last_units or 0.0


def choose(setting: str, key: str, units: float) -> Choice:
    """Compile or not for a job of ``units`` units (see the module docstring)."""
    if setting not in CHOICES:
        raise ValueError(f"compile={setting!r} is not one of {', '.join(CHOICES)}")
    if setting != "auto":
        flag = "--compile" if setting == "always" else "--no-compile"
        return Choice(setting == "always", flag, key, units)
    costs = read_ledger().get(key, Costs())
    if costs.eager_per_unit is None:
        return Choice(False, "not run here before: eager, and its speed measured", key, units)
    eager = costs.eager_per_unit * units
    speedup = (
        costs.eager_per_unit / costs.compiled_per_unit
        if costs.compiled_per_unit
        else UNMEASURED_SPEEDUP
    )
    if costs.compile_warm is not None:
        compiling, which = costs.compile_warm, "cached"
    elif costs.compile_cold is not None:
        compiling, which = costs.compile_cold, "first"
    else:
        compiling, which = UNMEASURED_COMPILE_SECONDS, "unmeasured"
    compiled = compiling + eager / speedup
    verdict = compiled < eager
    reason = (
        f"about {eager:.0f} s eager against {compiling:.0f} s to compile ({which}) + "
        f"{eager / speedup:.0f} s compiled ({speedup:.2f}x)"
    )
    return Choice(verdict, reason, key, units)


def compile_counts() -> tuple[float, int, int]:
    """Seconds this process has spent compiling, graphs compiled, and graphs that Inductor
    found in its cache, so far."""
    from torch._dynamo.utils import compilation_time_metrics, counters

    seconds = sum(compilation_time_metrics.get("_compile.compile_inner", []))
    return seconds, counters["stats"]["unique_graphs"], counters["inductor"]["fxgraph_cache_hit"]


@contextmanager
def measured(
    choice: Choice,
    done: Callable[[], float] | None = None,
    verbose: bool = False,
    ahead: Compilation | None = None,
) -> Iterator[None]:
    """Time the job of ``choice`` and record what it measured (nothing if it fails);
    ``done`` counts the units the job did, if they can fall short of ``choice.units`` (a
    generation that ends early). The compilation is what the job's calls compile or, if
    given, ``ahead``: one done before the job (an AOTInductor step's); it is told under
    ``verbose``."""
    before = compile_counts() if choice.compile and ahead is None else None
    start = time.perf_counter()
    yield
    seconds = time.perf_counter() - start
    compiled = compilation_since(before, verbose, ahead)
    if ahead is None and compiled is not None:  # (compiled within the job's time)
        seconds -= compiled.seconds
    record(choice, max(seconds, 0.0), choice.units if done is None else done(), compiled)


@dataclass(frozen=True)
class Compilation:
    """What a compilation took: seconds, graphs compiled, and how many Inductor found in
    its cache."""

    seconds: float
    graphs: int
    cached: int

    def __str__(self) -> str:
        return (
            f"compiled {self.graphs} graphs in {self.seconds:.1f} s ({self.cached} from the cache)"
        )


def compilation_since(
    before: tuple[float, int, int] | None,
    verbose: bool = False,
    ahead: Compilation | None = None,
) -> Compilation | None:
    """What was compiled since :func:`compile_counts` returned ``before`` (None: nothing
    was to be), or ``ahead`` if given (a compilation Dynamo does not count: an AOTInductor
    step's); told on stderr under ``verbose``."""
    if ahead is None and before is None:
        return None
    compiled = ahead
    if compiled is None:
        now = compile_counts()
        compiled = Compilation(*(a - b for a, b in zip(now, before, strict=True)))
    if verbose:
        print(compiled, file=sys.stderr)
    return compiled


def record(
    choice: Choice, seconds: float, units: float, compiled: Compilation | None = None
) -> None:
    """Record a job of ``choice`` that did ``units`` units in ``seconds`` of work, besides
    the compilation ``compiled`` says it paid (nothing is recorded of a job without units):
    its speed, eager or compiled, and the compilation, cold or warm (every graph from the
    cache)."""
    if units <= 0:
        return
    if compiled is None:
        remember(choice.key, eager_per_unit=seconds / units, last_units=units)
        return
    kind = "compile_warm" if compiled.cached == compiled.graphs else "compile_cold"
    per_unit = seconds / units
    remember(choice.key, compiled_per_unit=per_unit, last_units=units, **{kind: compiled.seconds})


def say(choice: Choice, verbose: bool) -> None:
    """The decision in one line on stderr, under ``--verbose``."""
    if verbose:
        verdict = "compiling" if choice.compile else "not compiling"
        print(f"{verdict}: {choice.reason}", file=sys.stderr)
