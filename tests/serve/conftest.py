"""The server of the language-model run (``lm_run``, in the tests' ``conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import live


@pytest.fixture(scope="session")
def lm_url(lm_run: Path) -> Iterator[str]:
    with live(lm_run, max_batch=4, max_queue=64) as url:
        yield url
