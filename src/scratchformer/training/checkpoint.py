"""Checkpoints for exact resume: the weights, optimizer, scheduler and random states of a
step, and the pointer to the latest one, never left half-written.

What this module keeps in a run directory::

    trainer_state.json              the current checkpoint's path, its step and trainer state
    checkpoints/step-00001000/
        model.safetensors           the weights; a tied tensor is stored once
        average.safetensors         the moving average of the weights, when one is kept
        optimizer.pt                optimizer.state_dict()
        scheduler.pt                scheduler.state_dict()
        rng.pt                      capture_rng()
        state.json                  the trainer state of this step, with "step"

A checkpoint directory is built whole (:func:`scratchformer.io.atomic_write_dir`: filled
under a hidden temp name, each file and then the directory fsynced, renamed into place); the
pointer is then replaced atomically. So a crash
at any moment leaves the old state or the new one, plus at most some temp entries that the
next save removes. The ``.pt`` files hold tensors, numbers and containers only, and are
read with :func:`scratchformer.io.safe_torch_load`: a checkpoint can never run code. The
file names are :mod:`scratchformer.training.rundir`'s, and one process writes a run
directory (its lock). The last few
checkpoints are kept: should the latest not load (a disk that lied, a file damaged since),
resuming falls back to the one before.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from ..io import (
    atomic_write_dir,
    atomic_write_json,
    load_tensors,
    remove_temps,
    safe_torch_load,
    temp_path,
    write_text,
    write_torch,
    write_weights,
)
from .rundir import (
    AVERAGE_FILE,
    CHECKPOINT_FILES,
    CHECKPOINTS,
    MODEL_FILE,
    OPTIMIZER_FILE,
    RNG_FILE,
    SCHEDULER_FILE,
    STATE_FILE,
    STEP_DIR,
    TRAINER_STATE,
)

# Random state ----------------------------------------------------------------------------


def capture_rng() -> dict[str, Any]:
    """The global random states: Python's ``random``, NumPy's legacy global generator,
    torch's CPU generator and every CUDA device's; as tensors, numbers and tuples only."""
    _, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Set the random states that ``capture_rng`` returned. CUDA states are skipped
    without CUDA, and restored only for the devices present."""
    random.setstate(state["python"])
    numpy = state["numpy"]
    keys = numpy["keys"].numpy().astype(np.uint32)
    np.random.set_state(
        ("MT19937", keys, numpy["pos"], numpy["has_gauss"], numpy["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])


_restore_rng = restore_rng  # load_checkpoint's argument ``restore_rng`` hides the function


# Checkpoints -----------------------------------------------------------------------------


def _step_dirs(checkpoints: Path) -> list[Path]:
    """The ``step-N`` directories in ``checkpoints``, oldest step first."""
    if not checkpoints.is_dir():
        return []
    found = [
        (int(match[1]), path)
        for path in checkpoints.iterdir()
        if (match := STEP_DIR.fullmatch(path.name)) and path.is_dir()
    ]
    return [path for _, path in sorted(found)]


def _is_complete(path: Path) -> bool:
    return all((path / name).is_file() for name in CHECKPOINT_FILES)


def _discard(path: Path) -> None:
    """Delete a directory: renamed away first (atomic), so it never exists half-deleted."""
    temp = temp_path(path)
    os.rename(path, temp)
    shutil.rmtree(temp, ignore_errors=True)


def save_checkpoint(
    run_dir: str | Path,
    *,
    step: int,
    model: nn.Module,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    state: dict[str, Any],
    average: nn.Module | None = None,
    keep: int = 1,
) -> Path:
    """Save everything an exact resume needs as ``run_dir/checkpoints/step-{step:08d}/``,
    point ``run_dir/trainer_state.json`` at it, and delete the older checkpoints but the
    ``keep - 1`` newest. Returns the checkpoint's directory.

    ``state`` is the trainer's own JSON-able state (epoch, best metric, data position, ...);
    it is saved with ``"step"`` added, and ``load_checkpoint`` returns it. ``average``, a
    moving average of the weights (an ``AveragedModel``), is saved beside them. Saving a step
    that already exists replaces it; checkpoints of later steps (left by a run that was
    resumed from an earlier one) are deleted.
    """
    if not isinstance(step, int) or step < 0:
        raise ValueError(f"step={step!r} must be an integer >= 0")
    if not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep={keep!r} must be an integer >= 1")
    if "checkpoint" in state:
        raise ValueError(f"state key 'checkpoint' is reserved for the path in {TRAINER_STATE}")
    run_dir = Path(run_dir)
    saved = {**state, "step": step}
    state_text = json.dumps(saved, indent=2, sort_keys=True) + "\n"  # not JSON-able: fail now
    checkpoints = run_dir / CHECKPOINTS
    checkpoints.mkdir(parents=True, exist_ok=True)
    remove_temps(checkpoints, "step-*")
    remove_temps(run_dir, TRAINER_STATE)

    def fill(directory: Path) -> None:
        write_weights(directory / MODEL_FILE, model)
        if average is not None:
            write_weights(directory / AVERAGE_FILE, average)
        write_torch(directory / OPTIMIZER_FILE, optimizer.state_dict())
        write_torch(directory / SCHEDULER_FILE, scheduler.state_dict())
        write_torch(directory / RNG_FILE, capture_rng())
        write_text(directory / STATE_FILE, state_text)

    path = checkpoints / f"step-{step:08d}"
    atomic_write_dir(path, fill)  # the same step saved again replaces it
    atomic_write_json(
        run_dir / TRAINER_STATE, {**saved, "checkpoint": f"{CHECKPOINTS}/{path.name}"}
    )

    steps = _step_dirs(checkpoints)
    newest = steps.index(path)
    for old in steps[: max(0, newest + 1 - keep)] + steps[newest + 1 :]:
        _discard(old)
    return path


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint ``trainer_state.json`` points at; should that be missing (it should
    not happen), the newest complete ``step-*`` directory, with a warning; else ``None``."""
    run_dir = Path(run_dir)
    pointed = _pointed(run_dir)
    if pointed is not None and _is_complete(pointed):
        return pointed
    complete = [path for path in _step_dirs(run_dir / CHECKPOINTS) if _is_complete(path)]
    if (run_dir / TRAINER_STATE).is_file():
        warnings.warn(
            f"{run_dir / TRAINER_STATE} names no complete checkpoint; using the newest one found",
            stacklevel=2,
        )
    return complete[-1] if complete else None


def _pointed(run_dir: Path) -> Path | None:
    """The checkpoint directory that ``trainer_state.json`` names, if it names one of the
    run's own (``checkpoints/step-*``: a pointer elsewhere, another run's or an absolute
    path, names none)."""
    try:
        state = json.loads((run_dir / TRAINER_STATE).read_text(encoding="utf-8"))
        pointed = run_dir / state["checkpoint"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    own = pointed.parent == run_dir / CHECKPOINTS and STEP_DIR.fullmatch(pointed.name)
    return pointed if own else None


def load_checkpoint(
    run_dir: str | Path,
    *,
    model: nn.Module,
    optimizer: Optimizer | None = None,
    scheduler: LRScheduler | None = None,
    average: nn.Module | None = None,
    restore_rng: bool = True,
    check_state: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Load the latest checkpoint of ``run_dir`` into ``model`` (and the optimizer,
    scheduler, moving average of the weights and global random states) and return its
    saved trainer state, with ``"step"``, which ``check_state`` may refuse (a
    ``ValueError``: values of the wrong type).

    Every file asked for is read whole before anything is loaded. If one of the latest
    checkpoint's does not load (a truncated, missing or swapped file, weights or states
    that do not fit), the checkpoint before it is taken, with a warning naming the file.
    Raises ``FileNotFoundError`` when the run has no checkpoint, ``ValueError`` naming the
    files at fault when none loads, or when ``average`` is asked for and the run was saved
    without one."""
    run_dir = Path(run_dir)
    pointed = _pointed(run_dir)
    candidates = [] if pointed is None else [pointed]  # then the others, newest first
    candidates += [path for path in _step_dirs(run_dir / CHECKPOINTS)[::-1] if path != pointed]
    if not candidates:
        raise FileNotFoundError(
            f"no checkpoint to resume from in {run_dir} "
            f"(no {TRAINER_STATE}, no {CHECKPOINTS}/step-*/)"
        )
    readers: dict[str, Callable[[Path], Any]] = {MODEL_FILE: load_file, STATE_FILE: _read_state}
    if average is not None:
        readers[AVERAGE_FILE] = load_file
    for name, wanted in ((OPTIMIZER_FILE, optimizer), (SCHEDULER_FILE, scheduler)):
        if wanted is not None:
            readers[name] = safe_torch_load
    if restore_rng:
        readers[RNG_FILE] = safe_torch_load
    pointer = run_dir / TRAINER_STATE
    failures = [f"{pointer} names no checkpoint"] if pointer.exists() and not pointed else []
    for path in candidates:
        saved_without_average = (path / MODEL_FILE).is_file() and not (path / AVERAGE_FILE).exists()
        if average is not None and saved_without_average:
            raise ValueError(
                f"{path} holds no {AVERAGE_FILE}: the run was saved without a moving "
                "average of the weights (train.ema_decay), so it cannot resume with one"
            )
        try:
            if not path.is_dir():
                raise ValueError(f"{path} is missing")
            files = {name: _read(path / name, read) for name, read in readers.items()}
            if check_state is not None:
                _fitting(path / STATE_FILE, check_state, files[STATE_FILE])
            for name, target in ((OPTIMIZER_FILE, optimizer), (SCHEDULER_FILE, scheduler)):
                if target is not None:
                    _fitting(path / name, target.load_state_dict, files[name])
            load_tensors(files[MODEL_FILE], model, str(path / MODEL_FILE))
            if average is not None:
                load_tensors(files[AVERAGE_FILE], average, str(path / AVERAGE_FILE))
            if restore_rng:
                _fitting(path / RNG_FILE, _restore_rng, files[RNG_FILE])
        except ValueError as error:  # (a later candidate loads every part again)
            failures.append(str(error).splitlines()[0])
            continue
        if failures:
            warnings.warn(f"{'; '.join(failures)}: resuming from {path}", stacklevel=2)
        return files[STATE_FILE]
    raise ValueError(f"no checkpoint of {run_dir} loads: {'; '.join(failures)}")


def _read(path: Path, read: Callable[[Path], Any]) -> Any:
    """``read(path)``; any failure is a ``ValueError`` that names the file."""
    if not path.is_file():
        raise ValueError(f"{path} is missing")
    return _naming(path, "does not load", lambda: read(path))


def _fitting(path: Path, load: Callable[[Any], Any], content: Any) -> None:
    """``load(content)``, the content of ``path``; content that does not fit (a swapped
    file, values of the wrong type or shape) is a ``ValueError`` that names the file."""
    _naming(path, "does not fit", lambda: load(content))


def _naming(path: Path, failure: str, call: Callable[[], Any]) -> Any:
    """``call()``; any exception it raises (a damaged file fails in its reader's own way)
    is a ``ValueError``: ``path``, the ``failure``, and the exception's first line."""
    try:
        return call()
    except Exception as error:
        reason = (str(error).splitlines() or [""])[0]
        raise ValueError(f"{path} {failure} ({type(error).__name__}: {reason})") from None


def _read_state(path: Path) -> dict[str, Any]:
    state = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise ValueError("no trainer state with a step")
    return state
