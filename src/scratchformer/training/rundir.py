"""The run directory's layout: the name of every file in it, its one writer, its metrics
log, its lock, and the checks of whether it may be written or read.

What a run directory holds::

    run.json                    its format and the scratchformer version that last wrote it
    config.json                 the recipe, its model section completed by the data
    tokenizer*.json             the task's tokenizers (``tokenizer-src``, ``tokenizer-tgt``)
    model.safetensors           the best weights by the task's metric
    chat_template.jinja         a language model's chat template, when it has one
    metrics.jsonl               the training log, one JSON record a line
    tensorboard/                the same log for TensorBoard, when asked for
    trainer_state.json          the latest checkpoint's path, its step and trainer state
    checkpoints/step-00001000/  a checkpoint (see :mod:`scratchformer.training.checkpoint`)
    attention.png               the demo's picture

- Training starts only in a new or empty directory; ``resume`` continues only a run that
  has a checkpoint; ``overwrite`` replaces only a run directory (one with ``run.json``, a
  recipe as ``config.json`` or a checkpoint), deleting the files of a run
  (:data:`RUN_FILES`) and refusing if anything else is there. A refusal leaves the
  directory as it was.
- One process writes a run directory: :func:`claim` holds an exclusive lock on
  ``DIR/.lock`` (which names the writer's pid) for a whole training run, so that a second
  writer fails at once with "DIR is in use by process N". The lock ends with the process,
  however it ends; the next writer removes the temp files of one that was killed.
- ``run.json`` records the directory's format and the scratchformer version that last wrote
  it; a run of a newer format is refused, not misread.

No other module names a run's files: a task's tokenizers are written and read here. This
module imports nothing above the tokenizer, so that the training loop, which writes the
run, stands below what opens one (:mod:`scratchformer.opening`: tasks, models,
quantization, Hugging Face checkpoints).
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch import nn

from ..config import QUANTIZATIONS, Recipe
from ..data.tokenizer import Tokenizer
from ..io import (
    LockHeld,
    append_text,
    atomic_write_json,
    atomic_write_text,
    hold_lock,
    listing,
    read_metadata,
    remove_temps,
    save_weights,
    temp_path,
)
from ..version import __version__

CONFIG_FILE = "config.json"
RUN_FILE = "run.json"
LOCK_FILE = ".lock"
MODEL_FILE = "model.safetensors"
"""The weights in a run directory (the best ones) and in each of its checkpoints."""
TOKENIZER_FILES = "tokenizer*.json"
"""The task's tokenizers, each named ``{its name}.json`` (its names begin ``tokenizer``)."""
METRICS_FILE = "metrics.jsonl"
"""The run directory's log, one JSON record per line, appended as training goes."""
CHAT_TEMPLATE_FILE = "chat_template.jinja"
"""A language model's chat template (the name ``transformers`` gives it): an imported
checkpoint's, the pretrained model's of a fine-tune, or the one a chat fine-tune trained
on; the server's chat completions render it."""
TENSORBOARD_DIR = "tensorboard"
TRAINER_STATE = "trainer_state.json"
CHECKPOINTS = "checkpoints"
STEP_DIR = re.compile(r"step-(\d+)")
"""A checkpoint's directory in ``checkpoints/``: ``step-N``, N the step it was saved at."""
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
RNG_FILE = "rng.pt"
STATE_FILE = "state.json"
AVERAGE_FILE = "average.safetensors"
CHECKPOINT_FILES = (MODEL_FILE, OPTIMIZER_FILE, SCHEDULER_FILE, RNG_FILE, STATE_FILE)
"""What every complete checkpoint directory holds (``average.safetensors`` too, with a
moving average of the weights)."""
ATTENTION_PICTURE = "attention.png"
"""The demo's picture of cross-attention."""
FORMAT = 1
"""The run-directory format this version writes, and the newest one it reads."""
RUN_FILES = (
    CONFIG_FILE,
    RUN_FILE,
    TOKENIZER_FILES,
    MODEL_FILE,
    CHAT_TEMPLATE_FILE,
    TRAINER_STATE,
    CHECKPOINTS,
    METRICS_FILE,
    TENSORBOARD_DIR,
    ATTENTION_PICTURE,
    ".*.tmp-*",  # what a killed writer left (see scratchformer.io)
)
"""What a run directory may hold (names or globs): ``--overwrite`` deletes these only."""
QUANTIZATION_KEY = "quantization"
"""The entry of a quantized run's ``model.safetensors`` header that names its quantization."""


# What is there, and whether it may be written --------------------------------------------


def contents(run_dir: Path) -> list[str]:
    """The names in ``run_dir`` (none if it does not exist), but its lock file."""
    if not run_dir.is_dir():
        return []
    return sorted(path.name for path in run_dir.iterdir() if path.name != LOCK_FILE)


def is_run_file(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in RUN_FILES)


def has_checkpoint(run_dir: Path) -> bool:
    """Whether the run saved a checkpoint (a run killed while writing its first one has
    a ``checkpoints/`` folder, but none in it)."""
    checkpoints = run_dir / CHECKPOINTS
    return (run_dir / TRAINER_STATE).is_file() or (
        checkpoints.is_dir()
        and any(STEP_DIR.fullmatch(path.name) for path in checkpoints.iterdir())
    )


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


def check_empty(run_dir: Path) -> None:
    """A directory to write a new run into (not a training run's) must be new or empty."""
    present = contents(run_dir)
    if present:
        raise ValueError(f"{run_dir} is not empty ({listing(present)}); choose another --out")


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
def claim(run_dir: Path, *, resume: bool, overwrite: bool) -> Iterator[Callable[[], None]]:
    """Lock ``run_dir`` (created if need be) for a training run, check it again under the
    lock (another writer may have come first), remove what killed writers left half-written
    and, with ``overwrite``, set its files aside. A writer at work is named before anything
    else. The block is given ``started``, to call once the new run is written: the files
    set aside are deleted then, and restored if the block fails before (a recipe, data or
    tokenizer refused costs the user nothing)."""
    check_free(run_dir)
    check_target(run_dir, resume=resume, overwrite=overwrite)
    run_dir.mkdir(parents=True, exist_ok=True)
    with locked(run_dir):
        check_target(run_dir, resume=resume, overwrite=overwrite)
        for directory in (run_dir, run_dir / CHECKPOINTS):
            remove_temps(directory, "*")
        aside = set_aside(run_dir) if overwrite else None

        def started() -> None:
            if aside is not None and aside.exists():
                shutil.rmtree(aside)

        try:
            yield started
        except BaseException:
            if aside is not None and aside.exists():
                restore(aside, run_dir)
            raise


def set_aside(run_dir: Path) -> Path:
    """Move the files of ``run_dir`` into a hidden temp directory in it (which the next
    :func:`claim` removes, should this process be killed), and return that directory."""
    aside = temp_path(run_dir / "replaced")
    aside.mkdir()
    for name in contents(run_dir):
        if run_dir / name != aside:
            (run_dir / name).rename(aside / name)
    return aside


def restore(aside: Path, run_dir: Path) -> None:
    """Put back the files :func:`set_aside` moved, in place of what was written since."""
    for name in contents(run_dir):
        path = run_dir / name
        if path == aside:
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    for path in aside.iterdir():
        path.rename(run_dir / path.name)
    aside.rmdir()


def check_free(run_dir: Path) -> None:
    """``ValueError`` naming the process that writes ``run_dir``, if one does: the reason
    given before any other not to write there."""
    if (run_dir / LOCK_FILE).is_file():  # (a lock file exists only while held, or if killed)
        with locked(run_dir):
            pass


@contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock (:func:`scratchformer.io.hold_lock` on ``DIR/.lock``);
    ``ValueError`` naming the holder's pid if it is taken."""
    try:
        with hold_lock(run_dir / LOCK_FILE):
            yield
    except LockHeld as held:
        raise ValueError(f"{run_dir} is in use by process {held.holder}") from None


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


# Writing a run ---------------------------------------------------------------------------


def write_run(
    run_dir: Path,
    recipe: Recipe,
    tokenizers: dict[str, Tokenizer],
    model: nn.Module | None = None,
    metadata: dict[str, str] | None = None,
    chat_template: str | None = None,
) -> None:
    """Write a run directory (created if need be): its format, the ``tokenizers`` (by name),
    the weights of ``model`` when there is one (a run about to train has none yet), with
    ``metadata`` in their header, the ``chat_template`` when there is one, and the recipe,
    last."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run_info(run_dir)
    for name, tokenizer in tokenizers.items():
        tokenizer.save(run_dir / f"{name}.json")
    if model is not None:
        write_model(run_dir, model, metadata)
    if chat_template is not None:
        atomic_write_text(run_dir / CHAT_TEMPLATE_FILE, chat_template)
    atomic_write_text(run_dir / CONFIG_FILE, recipe.to_json())


def write_model(run_dir: Path, model: nn.Module, metadata: dict[str, str] | None = None) -> None:
    """Replace the run's weights by ``model``'s, atomically."""
    save_weights(run_dir / MODEL_FILE, model, metadata)


def append_metrics(run_dir: Path, record: dict[str, Any]) -> None:
    """Append one record to the run's ``metrics.jsonl``."""
    append_text(run_dir / METRICS_FILE, json.dumps(record) + "\n")


def trim_metrics(run_dir: Path, step: int) -> None:
    """Make ``metrics.jsonl`` ready for a run resumed at ``step``: drop the records of later
    steps (logged after that checkpoint; the resumed run logs them again) and a torn last
    line (its writer killed or out of disk mid-record, with a warning), so that no new
    record is glued to one. A line that is not a record is left for ``plot`` to report."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return
    *lines, torn = path.read_text(encoding="utf-8").split("\n")
    if torn:
        warnings.warn(f"{path}: dropped a torn last line ({torn[:40]!r}...)", stacklevel=2)
    kept = [line for line in lines if (_logged_step(line) or 0) <= step]
    if torn or len(kept) < len(lines):
        atomic_write_text(path, "".join(line + "\n" for line in kept))


def _logged_step(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


# Reading a run ---------------------------------------------------------------------------


def read_tokenizers(run_dir: Path) -> dict[str, Tokenizer]:
    """The tokenizers that :func:`write_run` wrote, by name."""
    tokenizers = {path.stem: Tokenizer.load(path) for path in sorted(run_dir.glob(TOKENIZER_FILES))}
    if not tokenizers:
        raise FileNotFoundError(f"{run_dir} holds no {TOKENIZER_FILES}")
    return tokenizers


def read_chat_template(run_dir: Path) -> str | None:
    """The chat template that :func:`write_run` wrote (``None``: the run has none)."""
    path = run_dir / CHAT_TEMPLATE_FILE
    return path.read_text(encoding="utf-8") if path.is_file() else None


def trained_model(run_dir: Path) -> Path:
    """The run's weights file, which must exist."""
    path = run_dir / MODEL_FILE
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} holds no trained model ({MODEL_FILE}); train it first")
    return path


def saved_quantization(run_dir: Path) -> str | None:
    """The quantization of the run's weights (``None``: float)."""
    path = trained_model(run_dir)
    saved = read_metadata(path).get(QUANTIZATION_KEY)
    if saved is not None and saved not in QUANTIZATIONS:
        raise ValueError(
            f"{path} holds weights of quantization {saved!r}, which this version cannot read "
            f"(it reads {', '.join(QUANTIZATIONS)})"
        )
    return saved
