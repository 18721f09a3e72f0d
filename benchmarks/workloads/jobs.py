"""The ``jobs`` workload: a user's jobs, run as the user runs them (the command line, a
fresh process each), eagerly, compiled on a cold cache, compiled again on the cache that
left, and with the default ``--compile`` setting ("auto") after those runs.

Each job's wall time counts everything the user waits for: start-up, loading the run,
compiling, the work. The jobs are those of the ``--compile`` issue: translating Multi30k
test_2016_flickr with beam 5, generating 256 tokens from one prompt, and classifying the
872 sentences of SST-2 dev, each by its trained run under ``runs/`` (``multi30k-de-en``,
``shakespeare-char``, ``sst2``) or, where there is none, by a run of its recipe trained for
one step (random weights: a translation then runs every hypothesis to its length limit).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from scratchformer.data.readers import read_lines
from scratchformer.data.registry import dataset_file
from scratchformer.training.rundir import MODEL_FILE
from workloads.report import Figure, Row, Settings, Target, print_row

ROOT = Path(__file__).resolve().parents[2]
EAGER, COLD, WARM, AUTO = "eager", "compiled, cold cache", "compiled, warm cache", "auto"
QUICK_LINES = 64
QUICK_NEW_TOKENS = 32
WARM_TARGET = 1.5
"""Compiled on a warm cache must take at most 1/1.5 of the eager time."""


@dataclass(frozen=True)
class Job:
    name: str
    recipe: str
    run: str
    """The trained run under ``runs/`` used if present."""
    args: tuple[str, ...]
    stdin: bytes


def jobs(settings: Settings) -> list[Job]:
    """The three jobs, on their data (shorter under ``--quick``)."""
    lines = None if not settings.quick else QUICK_LINES
    german = read_lines(dataset_file("multi30k", "test_2016_flickr", lang="de"))
    sst2 = dataset_file("sst2", "dev").read_text(encoding="utf-8").splitlines()[1:]
    new_tokens = QUICK_NEW_TOKENS if settings.quick else 256
    return [
        Job(
            "translate",
            "multi30k-de-en",
            "multi30k-de-en",
            ("translate", "--beam", "5"),
            "\n".join(german[:lines]).encode() + b"\n",
        ),
        Job(
            "generate",
            "shakespeare-char",
            "shakespeare-char",
            ("generate", "--prompt", "ROMEO:", "--max-new-tokens", str(new_tokens), "--greedy"),
            b"",
        ),
        Job(
            "classify",
            "sst2",
            "sst2",
            ("classify",),
            "\n".join(line.split("\t")[1] for line in sst2[:lines]).encode() + b"\n",
        ),
    ]


def run_of(job: Job, scratch: Path) -> tuple[Path, str]:
    """The job's trained run, or one of its recipe trained for a step in ``scratch``."""
    trained = ROOT / "runs" / job.run
    if (trained / MODEL_FILE).exists():
        return trained, f"trained run runs/{job.run}"
    made = scratch / job.run
    recipe = ROOT / "recipes" / f"{job.recipe}.toml"
    command = ["train", str(recipe), "--out", str(made), "--set", "train.max_steps=1"]
    cli(command, b"", os.environ.copy())
    return made, f"recipes/{job.recipe}.toml trained for 1 step (random weights: no trained run)"


def cli(args: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, str, str]:
    """Seconds, stdout and stderr of ``scratchformer ARGS`` in a fresh process."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "scratchformer", *args], input=stdin, capture_output=True, env=env
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"scratchformer {' '.join(args)} failed: {done.stderr.decode()[-2000:]}")
    return seconds, done.stdout.decode(), done.stderr.decode()


def graphs(stderr: str) -> str:
    """What ``--verbose`` said of the compilation: graphs compiled and from the cache."""
    said = re.search(r"compiled (\d+) graphs? in ([\d.]+) s \((\d+) from the cache\)", stderr)
    return f"{said[1]} graphs, {said[3]} from the cache, {said[2]} s compiling" if said else ""


def job_row(job: Job, scratch: Path, settings: Settings) -> Row:
    """The job eagerly, compiled cold, compiled warm, and as "auto" then decides."""
    run, which = run_of(job, scratch)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(scratch / f"inductor-{job.name}")}
    command = [job.args[0], str(run), *job.args[1:], "--verbose"]
    outputs, seconds, notes = {}, {}, {}
    for candidate, flag in ((EAGER, "--no-compile"), (COLD, "--compile"), (WARM, "--compile")):
        seconds[candidate], outputs[candidate], err = cli([*command, flag], job.stdin, env)
        notes[candidate] = graphs(err)
    # auto, last, with what the others measured; it and eager again for medians, in the
    # order A B B A ... (the first of two like runs is the slower); the first eager run,
    # before any compilation, is left out (it ran faster than those after them)
    runs: dict[str, list[float]] = {EAGER: [], AUTO: []}
    pair: list[tuple[str, list[str]]] = [(AUTO, []), (EAGER, ["--no-compile"])]
    for repeat in range(settings.repeats_or(3, 1)):
        for candidate, flags in pair if repeat % 2 == 0 else pair[::-1]:
            took, outputs[candidate], err = cli([*command, *flags], job.stdin, env)
            runs[candidate].append(took)
            if candidate == AUTO:
                notes[AUTO] = next((line for line in err.splitlines() if "compiling" in line), "")
    for candidate, taken in runs.items():
        seconds[candidate] = statistics.median(taken)
        each = ", ".join(f"{t:.1f}" for t in taken)
        notes[candidate] = f"runs {each} s; {notes.get(candidate, '')}"[:120]
    figures = [Figure(c, seconds[c], "s", note=notes[c]) for c in (EAGER, COLD, WARM, AUTO)]
    eager, warm = outputs[EAGER].splitlines(), outputs[WARM].splitlines()
    same = sum(a == b for a, b in zip(eager, warm, strict=True))
    return Row(
        "jobs",
        job.name,
        f"scratchformer {' '.join(job.args)} by the {which}, wall seconds of the command; "
        f"compiled output equal to eager on {same} of {len(eager)} lines",
        figures,
        [
            Target(EAGER, 1.0, higher_is_better=False, of=AUTO),
            Target(EAGER, 1.0, higher_is_better=False, of=COLD),
            Target(EAGER, 1 / WARM_TARGET, higher_is_better=False, of=WARM),
        ],
        ours=AUTO,
        variants=(COLD, WARM),
        remark="each a fresh process with the job's own Inductor cache: the second compiled "
        "run reads what the first wrote; auto decides from what the runs before it measured",
    )


def user_jobs(settings: Settings) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for job in jobs(settings):
            row = job_row(job, Path(scratch), settings)
            print_row(row)
            rows.append(row)
    return rows
