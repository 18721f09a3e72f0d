"""Files that are never left half-written, and weights that never go through pickle.

A file is written under a hidden temp name in its own directory (``.NAME.tmp-RANDOM``),
fsynced, renamed over the old one, and the directory fsynced: readers, and a crash at any
moment, see the old file or the new one, never part of one (a killed writer may leave a
temp file behind, which no reader looks at). Weights are safetensors files, a tied tensor
stored once; the one ``torch.load`` of the library (optimizer state, pickled foreign
checkpoints) runs with ``weights_only=True``, so that no file can run code.

It is the package's one writer of files (``tests/test_writes.py`` holds this): data,
tasks, training, interop, the pictures and the commands all write through it. It imports
nothing else of the package.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


# Atomic writes ---------------------------------------------------------------------------


def temp_path(path: Path) -> Path:
    """A fresh hidden sibling of ``path``, ``.NAME.tmp-RANDOM``: same directory, same disk.
    A ``path`` whose directory is missing, or a file, is an error naming ``path`` (not the
    temp name)."""
    if path.parent.is_file():
        reason = f"{path.parent} is a file, not a directory"
        raise NotADirectoryError(errno.ENOTDIR, reason, str(path))
    if not path.parent.exists():
        raise FileNotFoundError(errno.ENOENT, f"no directory {path.parent}", str(path))
    return path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")


def remove_temps(directory: Path, name: str) -> None:
    """Remove what killed writers left of ``name`` (a glob) in ``directory``."""
    for temp in directory.glob(f".{name}.tmp-*"):
        if temp.is_dir():
            shutil.rmtree(temp, ignore_errors=True)
        else:
            temp.unlink(missing_ok=True)


def fsync(path: Path) -> None:
    """Flush a file's data, or a directory's entries, to the disk."""
    if path.is_dir() and os.name != "posix":
        return  # Windows cannot open a directory
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Replace ``path`` by what ``write`` writes to the temp path it is given.

    The temp file is fsynced, renamed onto ``path``, and the directory fsynced: readers,
    and a crash at any point, see the old file or the new one, never part of one. If
    ``write`` fails, the temp file is removed and the error raised.
    """
    path = Path(path)
    temp = temp_path(path)
    try:
        write(temp)
        fsync(temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync(path.parent)


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` in place, for a file that is itself being built (a temp
    file, or one in :func:`atomic_write_dir`'s temp directory)."""
    path.write_bytes(data)


def write_text(path: Path, text: str) -> None:
    """``text`` as UTF-8, in place (as :func:`write_bytes`)."""
    write_bytes(path, text.encode("utf-8"))


def write_torch(path: Path, obj: Any) -> None:
    """``torch.save(obj)`` in place (as :func:`write_bytes`): tensors, numbers and
    containers, read back by :func:`safe_torch_load`."""
    torch.save(obj, path)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    atomic_write(path, lambda temp: write_bytes(temp, data))


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda temp: write_text(temp, text))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """``obj`` as indented JSON with sorted keys; serialised before anything is written."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_write_chunks(path: str | Path, chunks: Iterable[bytes]) -> None:
    """Stream ``chunks`` into ``path``, atomically: one chunk in memory at a time. If the
    iterable raises (say, a download whose checksum is wrong), nothing replaces ``path``."""

    def write(temp: Path) -> None:
        with temp.open("xb") as out:
            for chunk in chunks:
                out.write(chunk)

    atomic_write(path, write)


def atomic_write_figure(path: str | Path, figure: Any, **options: Any) -> None:
    """A matplotlib ``figure`` saved to ``path`` atomically (``options`` go to
    ``savefig``): an interrupted save never leaves a truncated picture."""
    atomic_write(path, lambda temp: figure.savefig(temp, **options))


def atomic_write_gguf(path: str | Path, writer: Any) -> None:
    """The GGUF file that ``writer`` (a ``gguf.GGUFWriter`` holding its keys and tensors,
    made without a path) describes, written to ``path`` atomically."""

    def write(temp: Path) -> None:
        try:
            writer.write_header_to_file(temp)
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()

    atomic_write(path, write)


def atomic_write_dir(path: Path, fill: Callable[[Path], None]) -> None:
    """Build the directory ``path`` whole: ``fill`` writes its files into a fresh temp
    directory (with the in-place writers above), each file and the directory are fsynced,
    and it is renamed onto ``path`` -- an old ``path`` is set aside first and deleted once
    replaced. Readers, and a crash, see the old directory or the new one; a failed ``fill``
    leaves ``path`` as it was."""
    temp = temp_path(path)
    temp.mkdir()
    try:
        fill(temp)
        for file in temp.iterdir():
            fsync(file)
        fsync(temp)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    replaced = None
    if path.exists():
        replaced = temp_path(path)
        os.rename(path, replaced)
    os.rename(temp, path)
    fsync(path.parent)
    if replaced is not None:
        shutil.rmtree(replaced, ignore_errors=True)


def append_text(path: Path, text: str) -> None:
    """Append ``text`` to ``path`` (created if need be) and flush it: for a log, whose
    reader skips a torn last line."""
    with open(path, "a", encoding="utf-8") as file:
        file.write(text)


class LockHeld(Exception):
    """The lock file is held by another process, whose pid (as it wrote it) is ``holder``."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


@contextmanager
def hold_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the file ``path``, which names this process's pid, and
    delete it on release; :class:`LockHeld` if another process holds it. The lock ends with
    the process, however it ends. Without ``fcntl`` (Windows) there is no lock.

    A process that opened the file just before its holder deleted it holds a lock on a
    deleted file, so it checks that the file it locked is still the one at the path, and
    otherwise tries again."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise LockHeld(holder) from None
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


# Weights ---------------------------------------------------------------------------------


def _tied_groups(model: nn.Module) -> list[list[str]]:
    """State-dict names grouped by tensor. A tied weight, or a module registered twice,
    appears under several names; it is stored once, under the first."""
    groups: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    return list(groups.values())


def write_weights(path: Path, model: nn.Module, metadata: dict[str, str] | None = None) -> None:
    """Write ``model``'s state dict to a safetensors file, tied tensors once, with
    ``metadata`` in its header; in place, for a file that is itself being built (a temp
    file, or one in a temp directory)."""
    state = model.state_dict()
    groups = _tied_groups(model)
    tensors = {names[0]: state[names[0]].contiguous() for names in groups}
    aliases = {alias: names[0] for names in groups for alias in names[1:]}  # as save_model does
    save_file(tensors, path, metadata={**aliases, **(metadata or {})} or None)


def save_tensors(
    path: str | Path, tensors: dict[str, Tensor], metadata: dict[str, str] | None = None
) -> None:
    """Write ``tensors`` (contiguous, none sharing memory) to a safetensors file,
    atomically, with ``metadata`` in its header."""
    atomic_write(path, lambda temp: save_file(tensors, temp, metadata=metadata))


def save_weights(
    path: str | Path, model: nn.Module, metadata: dict[str, str] | None = None
) -> None:
    """Write ``model``'s state dict to a safetensors file, atomically; tied tensors once,
    ``metadata`` in the header."""
    atomic_write(path, lambda temp: write_weights(temp, model, metadata))


def listing(names: list[str], limit: int = 8) -> str:
    """``a, b, c and 5 more``: names for an error message."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def load_weights(
    path: str | Path, model: nn.Module, strict: bool = True
) -> tuple[list[str], list[str]]:
    """Load a safetensors file into ``model`` in place; returns the ``(missing, unexpected)``
    tensor names. A tied tensor may be stored under any of its names (files written by
    ``safetensors.torch.save_model`` load too).

    A wrong shape, or with ``strict`` a missing or unexpected tensor, raises ``ValueError``
    naming them, before anything is loaded.
    """
    return load_tensors(read_tensors(path), model, str(path), strict)


def read_tensors(path: str | Path) -> dict[str, Tensor]:
    """The tensors of a safetensors file; anything else is a ``ValueError`` naming it."""
    try:
        return load_file(path)
    except SafetensorError as error:
        raise ValueError(f"{path} is not a safetensors file: {error}") from error


def read_metadata(path: str | Path) -> dict[str, str]:
    """The metadata in a safetensors file's header (the names of tied tensors' aliases,
    and what its writer added); anything but a safetensors file is a ``ValueError``."""
    try:
        with safe_open(path, framework="pt") as file:
            return file.metadata() or {}
    except SafetensorError as error:
        raise ValueError(f"{path} is not a safetensors file: {error}") from error


def load_model(build: Callable[[], nn.Module], path: str | Path) -> nn.Module:
    """The model that ``build`` makes, with the weights of the safetensors file ``path``.

    The file is first checked against a model built on the meta device, which holds no
    memory, so that a config that does not fit its weights (an untrusted one asking for
    terabytes, say) is an error naming the tensors before anything is allocated."""
    tensors = read_tensors(path)
    with torch.device("meta"):
        fit_tensors(tensors, build(), str(path))
    model = build()
    load_tensors(tensors, model, str(path))
    return model


def load_tensors(
    tensors: dict[str, Tensor], model: nn.Module, origin: str, strict: bool = True
) -> tuple[list[str], list[str]]:
    """:func:`load_weights` of tensors already in memory; ``origin`` names them in errors."""
    chosen, missing, unexpected = fit_tensors(tensors, model, origin, strict)
    model.load_state_dict({name: tensors[name] for name in chosen}, strict=False)
    return missing, unexpected


def fit_tensors(
    tensors: dict[str, Tensor], model: nn.Module, origin: str, strict: bool = True
) -> tuple[list[str], list[str], list[str]]:
    """The names of ``tensors`` to load into ``model`` (one per tied group), the missing and
    the unexpected ones; a wrong shape, or with ``strict`` a missing or unexpected tensor,
    is a ``ValueError`` naming them. Nothing is loaded."""
    expected = model.state_dict()
    chosen: list[str] = []
    missing: list[str] = []
    unexpected: list[str] = []
    for names in _tied_groups(model):
        found = [name for name in names if name in tensors]
        chosen += found[:1]
        unexpected += found[1:]  # saved apart, but one tensor in the model
        if not found:
            missing.append(names[0])
    unexpected += sorted(tensors.keys() - expected.keys())
    problems = [
        f"{name} is {tuple(tensors[name].shape)} in the file, "
        f"{tuple(expected[name].shape)} in the model"
        for name in chosen
        if tensors[name].shape != expected[name].shape
    ]
    if strict and missing:
        problems.append(f"missing: {listing(missing)}")
    if strict and unexpected:
        problems.append(f"unexpected: {listing(unexpected)}")
    if problems:
        raise ValueError(f"{origin} does not fit {type(model).__name__}: {'; '.join(problems)}")
    return chosen, missing, unexpected


def safe_torch_load(path: Path) -> Any:
    """The only ``torch.load`` of the library: tensors and plain containers, never pickled
    code."""
    return torch.load(path, map_location="cpu", weights_only=True)
