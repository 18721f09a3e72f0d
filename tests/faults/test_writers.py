"""Two writers at once: while one process trains in a run directory, others that would
write there (resuming it from the command line, replacing it from Python) are refused and
change nothing, and the first one ends as if alone."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from faults.harness import INJECTED, SURVIVED, Training, assert_recovered, train_here
from helpers import snapshot


def test_a_second_writer_is_refused_while_the_first_trains(tmp_path: Path, reference) -> None:
    run_dir = tmp_path / "run"
    first = Training(run_dir, cwd=tmp_path)
    first.wait_for_a_step()
    first.wait_for_a_step()  # the first checkpoint is written: there is a run to resume
    first.process.send_signal(signal.SIGSTOP)  # so that the directory holds still
    in_use = f"{run_dir} is in use by process {first.process.pid}"
    faults = ["second writer resuming (command line)", "second writer replacing (Python)"]
    INJECTED.update(faults)
    try:
        before = snapshot(tmp_path)
        status, stderr = Training(run_dir, "--resume", cwd=tmp_path).finish()
        assert (status, stderr) == (2, f"scratchformer: error: {in_use}\n")
        with pytest.raises(ValueError, match=f"^{in_use}$"):
            train_here(run_dir, overwrite=True)
        assert snapshot(tmp_path) == before
    finally:
        first.process.send_signal(signal.SIGCONT)
    status, stderr = first.finish()
    assert status == 0, stderr
    assert_recovered(run_dir, reference.outcome())
    SURVIVED.update(faults)
