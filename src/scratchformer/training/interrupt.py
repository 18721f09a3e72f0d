"""Stopping on SIGTERM or SIGINT without losing the step in progress.

Schedulers, ``timeout`` and ``docker stop`` send SIGTERM; Ctrl-C sends SIGINT. While a
:class:`StopSignals` is entered, either signal raises :class:`~scratchformer.errors.Interrupted`
at once, unless the training loop has said that it can stop cleanly (:meth:`deferring`):
then the signal is only recorded, and the loop stops after the step in progress, having
saved a checkpoint of it. A second signal stops at once, for a user who will not wait.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from ..errors import Interrupted

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """A context that turns SIGTERM and SIGINT into requests to stop, and puts the previous
    handlers back on exit. Handlers can only be set in the main thread; elsewhere it does
    nothing (the signals keep their handlers)."""

    def __init__(self) -> None:
        self.received: int | None = None
        """The first signal received, if any."""
        self._deferring = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {number: signal.signal(number, self._handle) for number in SIGNALS}
        return self

    def __exit__(self, *_: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    @contextmanager
    def deferring(self) -> Iterator[None]:
        """While inside, a first signal waits for :attr:`received` to be looked at."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False

    def _handle(self, number: int, _: FrameType | None) -> None:
        first = self.received is None
        if first:
            self.received = number
        if not (first and self._deferring):
            raise Interrupted(number)
