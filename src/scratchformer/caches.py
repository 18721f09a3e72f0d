"""Where the project keeps what it downloads and compiles: the user's cache directory.
Importing this module loads nothing heavy, so the command line can set Inductor's cache
before torch's compiler is imported (which fixes its own)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The project's cache, ``$XDG_CACHE_HOME/scratchformer`` or ``~/.cache/...``: downloaded
    datasets, a directory each, pretraining corpora's token files, and compiled code
    (``inductor/``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "scratchformer"


def compiled_code_dir() -> Path:
    """Where Inductor keeps what it compiled, so that a model is compiled once per machine
    rather than once per process: ``$TORCHINDUCTOR_CACHE_DIR`` if set, else ``inductor/``
    in the project's cache, set as ``$TORCHINDUCTOR_CACHE_DIR`` for this process. Deleting
    it costs only the next compilation."""
    if not os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir() / "inductor")
    return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
