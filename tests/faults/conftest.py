"""Fault injection: training killed (SIGKILL) or stopped (SIGTERM) at random moments, two
writers at once, a full disk, each file of a checkpoint damaged in turn. After each fault
the run goes on and must end as the uninterrupted run ends. The session prints how many
faults of each kind were injected and survived."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faults.harness import INJECTED, SURVIVED, Training, outcome
from helpers import FAULTS_PROPERTY


class Reference:
    """The uninterrupted run, trained in a process of its own while the tests go on."""

    def __init__(self, directory: Path) -> None:
        self.run_dir = directory / "run"
        self.training = Training(self.run_dir, cwd=directory)
        self._outcome: dict[str, Any] | None = None

    def outcome(self) -> dict[str, Any]:
        if self._outcome is None:
            status, stderr = self.training.finish()
            assert status == 0, stderr
            self._outcome = outcome(self.run_dir)
        return self._outcome


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reference]:
    reference = Reference(tmp_path_factory.mktemp("reference"))
    yield reference
    reference.training.process.kill()
    reference.training.finish()


@pytest.fixture(autouse=True)
def _report_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    """Puts the faults this test injected and survived in its report, from which the tally
    is printed (``tests/conftest.py``) whichever process ran the test."""
    injected, survived = INJECTED.copy(), SURVIVED.copy()
    yield
    counts = {
        kind: [INJECTED[kind] - injected[kind], SURVIVED[kind] - survived[kind]]
        for kind in INJECTED - injected
    }
    request.node.user_properties.append((FAULTS_PROPERTY, counts))
