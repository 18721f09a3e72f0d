"""The project's own exceptions, apart from everything so that the command line can tell
them without importing what raises them."""

from __future__ import annotations

import importlib.util
import signal
from collections.abc import Iterator
from contextlib import contextmanager


class UsageError(ValueError):
    """A mistake in how a command was called."""


class LineError(ValueError):
    """A line of input refused, by its number (from 1), for the command that read the
    lines to say where they came from."""

    def __init__(self, number: int, reason: str) -> None:
        super().__init__(f"line {number}: {reason}")
        self.number = number
        self.reason = reason


class DataSettingsError(ValueError):
    """A split that a recipe's data settings cannot give: none is named, or not what
    reading it needs. What finds it out does not know where the recipe came from; the
    command says, through :func:`naming_the_source`."""


@contextmanager
def naming_the_source(source: object) -> Iterator[None]:
    """A :class:`DataSettingsError` raised within, said again with ``source`` first: the
    recipe file or the run's ``config.json`` whose settings are at fault."""
    try:
        yield
    except DataSettingsError as error:
        raise DataSettingsError(f"{source}: {error}") from None


class TrainingError(RuntimeError):
    """Training cannot go on, e.g. the loss is no longer a finite number."""


class Interrupted(BaseException):
    """Training stopped by a signal (SIGTERM from a scheduler, ``timeout`` or ``docker stop``;
    SIGINT from Ctrl-C). Like ``KeyboardInterrupt`` it is no ``Exception``, so that no
    ``except Exception`` swallows it; the command exits with ``128 + signal number``."""

    def __init__(self, signum: int, message: str | None = None) -> None:
        self.signum = signum
        super().__init__(message or f"interrupted by {signal.Signals(signum).name}")

    @property
    def status(self) -> int:
        """The exit status of a process that a signal ended: 143 for SIGTERM, 130 for SIGINT."""
        return 128 + self.signum


def require_extra(*packages: str, purpose: str, extra: str = "export") -> None:
    """Refuse ``purpose`` in one line naming the optional packages it lacks and the extra of
    scratchformer that installs them."""
    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    if missing:
        raise ValueError(
            f"{purpose} needs {' and '.join(missing)}: pip install 'scratchformer[{extra}]'"
        )
