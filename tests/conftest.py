"""Shared test set-up.

Tests run tiny models, for which one thread is fastest: with two, OpenMP's hand-offs cost
more than the work and a busy machine makes them much slower still.
"""

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state."""
    torch.manual_seed(0)
