"""The project's CPU kernels: built with OpenMP (so that they run on torch's threads), and a
build that fails warns and leaves them unused."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch.utils import cpp_extension

from helpers import with_cpu_kernels
from scratchformer.nn import cpu_kernels

pytestmark = with_cpu_kernels


def test_the_library_calls_openmp() -> None:
    """ATen's parallel_for compiles to a parallel region only with OpenMP; built without
    it, every kernel runs on one thread, which no result shows."""
    library = Path(cpp_extension._get_build_directory(cpu_kernels.NAME, verbose=False))
    assert b"GOMP_parallel" in (library / f"{cpu_kernels.NAME}.so").read_bytes()


def test_a_library_that_cannot_be_built_warns_and_is_not_used(monkeypatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Error building extension 'scratchformer_cpu_kernels'\nmore")

    monkeypatch.setattr(cpp_extension, "load", fail)
    with pytest.warns(UserWarning, match="could not be built .Error building extension"):
        assert not cpu_kernels.kernels_available.__wrapped__()
