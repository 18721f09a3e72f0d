"""Training killed (SIGKILL) or stopped (SIGTERM) at random moments -- in a step, in an
evaluation, in the middle of writing a checkpoint -- and resumed each time: the run ends
exactly as the uninterrupted one, and nothing outside its directory is touched."""

from __future__ import annotations

import random
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from faults.harness import (
    INJECTED,
    SURVIVED,
    Training,
    assert_recovered,
    flags_to_go_on,
    leftovers,
)
from helpers import snapshot
from scratchformer.training.checkpoint import latest_checkpoint

LATEST = 0.25
"""Signals come up to this many seconds after an evaluation was logged: a few steps."""


def stop_and_go_on(directory: Path, signum: int, trials: int, seed: int) -> list[str]:
    """Train in ``directory / "run"``, sending ``signum`` at a random moment of each of
    ``trials`` processes, each going on from what the one before left; then train to the
    end. Returns the faults injected."""
    run_dir, cwd = directory / "run", directory / "cwd"
    cwd.mkdir()
    (directory / "notes.txt").write_text("not the run's\n")
    outside = outside_the_run(directory)
    moments = random.Random(seed)
    faults = []
    for _ in range(trials):
        training = Training(run_dir, *flags_to_go_on(run_dir), cwd=cwd)
        training.wait_for_a_step()
        time.sleep(moments.uniform(0, LATEST))
        training.process.send_signal(signum)
        status, stderr = training.finish()
        if status == 0:
            break  # it had finished: no fault
        if signum == signal.SIGKILL:
            assert status == -signal.SIGKILL, stderr
            in_a_write = any(".tmp-" in name for name in leftovers(run_dir))
            faults.append("SIGKILL in a write (temp files left)" if in_a_write else "SIGKILL")
            continue
        faults.append("SIGTERM")
        assert status == 143, stderr
        stopped = re.fullmatch(
            rf"scratchformer: interrupted at step (\d+); checkpoint of step \1 kept in "
            rf"{re.escape(str(run_dir))}; resume with --resume",
            stderr.splitlines()[-1],
        )
        assert stopped, stderr
        assert latest_checkpoint(run_dir).name == f"step-{int(stopped[1]):08d}"
        assert leftovers(run_dir) == []
    status, stderr = Training(run_dir, *flags_to_go_on(run_dir), cwd=cwd).finish()
    assert status == 0, stderr
    assert outside_the_run(directory) == outside
    return faults


def outside_the_run(directory: Path) -> dict[str, bytes | None]:
    """``snapshot(directory)`` but for its run directory, ``run``."""
    return {k: v for k, v in snapshot(directory).items() if k.partition("/")[0] != "run"}


def kill_and_stop_at_random(tmp_path: Path, reference, trials: int) -> None:
    chains = {signal.SIGKILL: tmp_path / "killed", signal.SIGTERM: tmp_path / "stopped"}
    for directory in chains.values():
        directory.mkdir()
    with ThreadPoolExecutor(len(chains)) as pool:  # the two chains at once, on two cores
        futures = [
            pool.submit(stop_and_go_on, directory, signum, trials, seed)
            for seed, (signum, directory) in enumerate(chains.items())
        ]
        faults = [fault for future in futures for fault in future.result()]
    INJECTED.update(faults)
    for directory in chains.values():
        assert_recovered(directory / "run", reference.outcome())
    SURVIVED.update(faults)


def test_killed_or_stopped_at_random_moments_the_run_ends_as_if_never_stopped(
    tmp_path: Path, reference
) -> None:
    kill_and_stop_at_random(tmp_path, reference, trials=2)


@pytest.mark.slow
def test_many_kills_and_stops(tmp_path: Path, reference) -> None:
    kill_and_stop_at_random(tmp_path, reference, trials=15)
