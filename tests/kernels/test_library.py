"""The project's CPU kernels: defined and built on first use, not at import; built with
OpenMP (so that they run on torch's threads); a build that fails warns and leaves them
unused. Where they cannot be built these tests skip, unless
SCRATCHFORMER_REQUIRE_KERNELS=1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from helpers import with_cpu_kernels
from scratchformer.kernels import library

PROBE = """
import torch
import scratchformer.inference, scratchformer.kernels, scratchformer.nn

def defined():
    names = ("int8_matmul", "few_query_attention")
    return [hasattr(torch.ops.scratchformer, name) for name in names]

imported = defined()
scratchformer.kernels.library.operators()
print(imported, defined())
"""


def test_the_operators_are_defined_on_first_use_not_at_import() -> None:
    """Importing the building blocks, the kernels' package or the decoding code defines no
    operator (``nn`` is plain PyTorch); asking for them defines both."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[False, False] [True, True]"


@with_cpu_kernels
def test_the_library_calls_openmp() -> None:
    """ATen's parallel_for compiles to a parallel region only with OpenMP; built without
    it, every kernel runs on one thread, which no result shows."""
    build = Path(cpp_extension._get_build_directory(library.NAME, verbose=False))
    assert b"GOMP_parallel" in (build / f"{library.NAME}.so").read_bytes()


@with_cpu_kernels
def test_a_library_that_cannot_be_built_warns_and_is_not_used(monkeypatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Error building extension 'scratchformer_cpu_kernels'\nmore")

    monkeypatch.setattr(cpp_extension, "load", fail)
    with pytest.warns(UserWarning, match="could not be built .Error building extension"):
        assert not library.kernels_available.__wrapped__()
