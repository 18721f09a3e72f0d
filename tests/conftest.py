"""Shared test set-up.

Tests run tiny models, for which one thread is fastest: with two, OpenMP's hand-offs cost
more than the work and a busy machine makes them much slower still. ``make test`` runs
them in one process a core (pytest-xdist), so each process keeps to one thread.
"""

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state."""
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared datasets (``$SCRATCHFORMER_DATA``, else ``../shared/data``)."""
    path = Path(os.environ.get("SCRATCHFORMER_DATA") or REPO.parent / "shared" / "data")
    if not path.is_dir():
        pytest.skip(f"datasets not found at {path}; set SCRATCHFORMER_DATA")
    os.environ["SCRATCHFORMER_DATA"] = str(path)
    return path
