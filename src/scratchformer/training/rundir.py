"""Run directories: what one holds, what may be written over, who may write it, and which
format it is in.

- Training starts only in a new or empty directory; ``resume`` continues only a run that
  has a checkpoint; ``overwrite`` replaces only a run directory (one with ``run.json``, a
  recipe as ``config.json`` or a checkpoint), deleting the files of a run
  (:data:`RUN_FILES`) and refusing if anything else is there. A refusal leaves the
  directory as it was.
- One process writes a run directory: :func:`claim` holds an exclusive ``flock`` on
  ``DIR/.lock`` (which names the writer's pid) for a whole training run, so that a second
  writer fails at once with "DIR is in use by process N". The lock ends with the process,
  however it ends; the next writer removes the temp files of one that was killed. Without
  ``fcntl`` (Windows) there is no lock.
- ``run.json`` records the directory's format and the scratchformer version that last wrote
  it; a run of a newer format is refused, not misread.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..io import MODEL_FILE, atomic_write_json, listing, remove_temps
from ..version import __version__
from .checkpoint import CHECKPOINTS, TRAINER_STATE
from .trainer import METRICS_FILE

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

CONFIG_FILE = "config.json"
RUN_FILE = "run.json"
LOCK_FILE = ".lock"
FORMAT = 1
"""The run-directory format this version writes, and the newest one it reads."""
RUN_FILES = (
    CONFIG_FILE,
    RUN_FILE,
    "tokenizer*.json",
    MODEL_FILE,
    TRAINER_STATE,
    CHECKPOINTS,
    METRICS_FILE,
    "tensorboard",
    "attention.png",  # the demo's picture
    ".*.tmp-*",  # what a killed writer left (see scratchformer.io)
)
"""What a run directory may hold (names or globs): ``--overwrite`` deletes these only."""


def contents(run_dir: Path) -> list[str]:
    """The names in ``run_dir`` (none if it does not exist), but its lock file."""
    if not run_dir.is_dir():
        return []
    return sorted(path.name for path in run_dir.iterdir() if path.name != LOCK_FILE)


def is_run_file(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in RUN_FILES)


def has_checkpoint(run_dir: Path) -> bool:
    return (run_dir / TRAINER_STATE).is_file() or (run_dir / CHECKPOINTS).is_dir()


def is_run(path: Path) -> bool:
    """Whether ``path`` is a run directory (trained, started or imported)."""
    return (path / RUN_FILE).is_file() or has_checkpoint(path) or _holds_recipe(path)


def _holds_recipe(path: Path) -> bool:
    """A run's ``config.json`` is a recipe, with a task (a Hugging Face one has none)."""
    try:
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "task" in config


def check_target(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Raise ``ValueError`` unless training may write ``run_dir``: new or empty; with
    ``resume``, a run with a checkpoint; with ``overwrite``, a run directory that holds
    nothing but a run's files."""
    if resume and overwrite:
        raise ValueError("--resume continues a run and --overwrite replaces it: choose one")
    if resume:
        if not has_checkpoint(run_dir):
            raise ValueError(f"{run_dir} holds no checkpoint to resume; train without --resume")
        return
    names = contents(run_dir)
    if not names:
        return
    if not is_run(run_dir):
        raise ValueError(
            f"{run_dir} is not empty ({listing(names)}) and holds no run; choose another --out"
        )
    if not overwrite:
        if has_checkpoint(run_dir):
            raise ValueError(
                f"{run_dir} already holds a run: add --resume to continue it, --overwrite to "
                "train it again from the start, or choose another --out"
            )
        raise ValueError(
            f"{run_dir} already holds a run without a checkpoint (an imported model, or a "
            "run stopped before its first checkpoint): --overwrite replaces it, or choose "
            "another --out"
        )
    foreign = [name for name in names if not is_run_file(name)]
    if foreign:
        raise ValueError(
            f"{run_dir} holds files that are no run's ({listing(foreign)}): --overwrite "
            "replaces only a run directory; move them away or choose another --out"
        )


@contextmanager
def claim(run_dir: Path, *, resume: bool, overwrite: bool) -> Iterator[None]:
    """Lock ``run_dir`` (created if need be) for a training run, check it again under the
    lock (another writer may have come first), remove what killed writers left half-written
    and, with ``overwrite``, empty it."""
    check_target(run_dir, resume=resume, overwrite=overwrite)
    run_dir.mkdir(parents=True, exist_ok=True)
    with locked(run_dir):
        check_target(run_dir, resume=resume, overwrite=overwrite)
        for directory in (run_dir, run_dir / CHECKPOINTS):
            remove_temps(directory, "*")
        if overwrite:
            for name in contents(run_dir):
                path = run_dir / name
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        yield


@contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock; ``ValueError`` naming the holder's pid if it is taken.

    The lock file is deleted on release. A writer that opened it just before then holds a
    lock on a deleted file, so it checks that the file it locked is still the one at the
    path, and otherwise tries again."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    path = run_dir / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ValueError(f"{run_dir} is in use by process {holder}") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def write_run_info(run_dir: Path) -> None:
    """Record in ``run.json`` the format of ``run_dir`` and this scratchformer's version."""
    atomic_write_json(run_dir / RUN_FILE, {"format": FORMAT, "scratchformer_version": __version__})


def check_format(run_dir: Path) -> None:
    """Raise ``ValueError`` if ``run_dir`` was written in a format newer than this version
    reads (a run without ``run.json`` predates it: format 1)."""
    path = run_dir / RUN_FILE
    if not path.is_file():
        return
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        written, version = int(info["format"]), info.get("scratchformer_version", "?")
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a run record ({error!r})") from None
    if written > FORMAT:
        raise ValueError(
            f"{run_dir} was written by scratchformer {version} in run format {written}; "
            f"scratchformer {__version__} reads formats up to {FORMAT}: upgrade scratchformer"
        )
