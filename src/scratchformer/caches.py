"""Where the project keeps what it downloads and compiles: the user's cache directory.
Importing this module loads nothing heavy, so the command line can set Inductor's cache
before torch's compiler is imported (which fixes its own)."""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path

CPU_INFO = Path("/proc/cpuinfo")
CPU_FIELDS = ("model name", "flags", "Features", "CPU part")
"""The lines of ``/proc/cpuinfo`` that tell processors and their instruction sets apart
(x86: ``model name``, ``flags``; Arm: ``Features``, ``CPU part``)."""


def cache_dir() -> Path:
    """The project's cache, ``$XDG_CACHE_HOME/scratchformer`` or ``~/.cache/...``: downloaded
    datasets, a directory each, pretraining corpora's token files, and compiled code
    (``inductor/``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "scratchformer"


def cpu_key() -> str:
    """A name for this processor and the kernels torch will pick on it: the architecture
    and a hash of its model and instruction-set flags and of ``$ATEN_CPU_CAPABILITY``
    (which makes torch and Inductor generate code for a lower instruction set)."""
    described = [platform.machine(), platform.processor(), os.environ.get("ATEN_CPU_CAPABILITY")]
    try:
        lines = CPU_INFO.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for field in CPU_FIELDS:  # the first processor's line of each field
        described += [line for line in lines if line.split(":")[0].strip() == field][:1]
    digest = hashlib.sha256("\n".join(map(str, described)).encode()).hexdigest()[:12]
    return f"{platform.machine() or 'cpu'}-{digest}"


def compiled_code_dir() -> Path:
    """Where Inductor keeps what it compiled, so that a model is compiled once per machine
    rather than once per process: ``$TORCHINDUCTOR_CACHE_DIR`` if set, else
    ``inductor/<cpu>`` in the project's cache (:func:`cpu_key`), set as
    ``$TORCHINDUCTOR_CACHE_DIR`` for this process. One directory per processor, because
    Inductor's cache does not tell instruction sets apart: code compiled for AVX-512, read
    where torch runs AVX2 kernels, gave wrong results, and on a CPU without the instructions
    would stop the process (a home directory shared by different machines). Deleting it
    costs only the next compilation."""
    if not os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir() / "inductor" / cpu_key())
    return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
