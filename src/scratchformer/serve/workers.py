"""The threads that run the model for the server, so that its event loop never waits on
it: a decoding thread that steps the decoding engine
(:class:`~scratchformer.inference.Engine`, for language models), or a batching thread that
gathers the inputs of concurrent requests into one call of the model (every other
endpoint). Either way the model is used by one
thread only, and a full queue is refused at once (:class:`Busy`) instead of growing.

The event loop's thread never computes with the model, not even while the server starts:
loading and compiling run in a thread of their own that ends with them
(:func:`in_a_passing_thread`). OpenMP (GNU's, as torch's CPU builds link) keeps a pool of
threads for every thread that ever ran a parallel region, for as long as it lives, and
once the pools' threads outnumber the cores it spins less before sleeping: each parallel
region of a worker then waits on the kernel to wake its threads, which costs a small
linear map more than its arithmetic (docs/lab-notes.md, "One OpenMP pool")."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

from ..inference.engine import Engine, Request
from .metrics import Metrics

T = TypeVar("T")


def in_a_passing_thread(work: Callable[[], T]) -> T:
    """``work()``, run in a thread that ends when it returns (its error raised here): the
    OpenMP threads it starts end with it (see the module docstring)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="loading") as pool:
        return pool.submit(work).result()


class Busy(Exception):
    """The queue is full: the server answers 429, to be tried again later."""


@dataclass(frozen=True)
class Progress:
    """What a decoding request has come to: its first ``count`` tokens are final, and it
    is done if ``finish_reason`` is set; or it failed with ``error``."""

    count: int
    finish_reason: str | None = None
    error: str | None = None


class Usage:
    """The model's work over a server's life: units (tokens decoded, inputs run) and the
    seconds spent computing them, which the server records at its end to decide whether
    the next one compiles (:mod:`~scratchformer.inference.compile_choice`)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.units = 0.0
        self.lock = threading.Lock()

    def add(self, seconds: float, units: float) -> None:
        with self.lock:
            self.seconds += seconds
            self.units += units

    def timed(self, work: Callable[[list[Any]], list[Any]]) -> Callable[[list[Any]], list[Any]]:
        """``work`` (a list of inputs -> their outputs), its time and inputs counted."""

        def counted(inputs: list[Any]) -> list[Any]:
            start = time.perf_counter()
            outputs = work(inputs)
            self.add(time.perf_counter() - start, len(inputs))
            return outputs

        return counted


@dataclass(frozen=True)
class ModelUse:
    """How the server's threads use its one model: in ``context`` (the precision, entered
    by each thread), one at a time (``lock``, held while computing), counted in
    ``metrics`` and ``usage``."""

    context: Callable[[], AbstractContextManager[Any]]
    lock: AbstractContextManager[Any]
    metrics: Metrics
    usage: Usage


class ModelThread:
    """A thread of its own that runs the model as ``use`` says, from :meth:`start` until
    :meth:`stop`; ``wake`` guards its queue and wakes it."""

    def __init__(self, name: str, use: ModelUse) -> None:
        self.context = use.context
        self.model_lock = use.lock
        self.metrics = use.metrics
        self.usage = use.usage
        self.wake = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self.run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Let the thread finish what it is computing, then end it."""
        with self.wake:
            self.stopping = True
            self.wake.notify()
        self.thread.join()

    def run(self) -> None:
        raise NotImplementedError


class DecodingWorker(ModelThread):
    """Steps ``engine`` while any request is live or waiting; sleeps otherwise. At most
    ``max_queue`` requests wait for a row."""

    def __init__(
        self,
        engine: Engine,
        max_queue: int,
        use: ModelUse,
    ) -> None:
        super().__init__("decoding", use)
        self.engine = engine
        self.max_queue = max_queue
        self.listeners: dict[Request, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}

    def submit(self, requests: list[Request]) -> asyncio.Queue[Progress]:
        """Queue ``requests`` (the choices of one API request: they join together or not at
        all); each of their steps arrives on the returned queue as a ``(request,
        Progress)`` pair. Raises :class:`Busy` when the queue is full, ValueError when a
        request does not fit a row."""
        queue: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        with self.wake:
            if len(self.engine.waiting) + len(requests) > self.max_queue:
                raise Busy(f"{len(self.engine.waiting)} requests are waiting already")
            for request in requests:
                self.engine.check(request)
            for request in requests:
                self.listeners[request] = (loop, queue)
                self.engine.add(request)
            self.metrics.queue_depth.set(len(self.engine.waiting))
            self.wake.notify()
        return queue

    def run(self) -> None:
        with self.context():
            while True:
                with self.wake:
                    while self.engine.idle and not self.stopping:
                        self.wake.wait()
                    if self.stopping:
                        return
                try:
                    with self.model_lock:
                        start = time.perf_counter()
                        moved = self.engine.step()
                        self.usage.add(time.perf_counter() - start, len(moved))
                except Exception as error:  # every request hears of it
                    self.fail(f"{type(error).__name__}: {error}")
                    continue
                self.report(moved)

    def report(self, moved: list[Request]) -> None:
        with self.wake:
            self.metrics.batch_size.observe(len(moved))
            self.metrics.queue_depth.set(len(self.engine.waiting))
            for request in moved:
                self.tell(request, Progress(len(request.tokens), request.finish_reason))
                if request.done:
                    self.metrics.tokens.inc(len(request.tokens))
                    self.listeners.pop(request, None)
            for request in [r for r in self.listeners if r.cancelled]:
                del self.listeners[request]

    def tell(self, request: Request, progress: Progress) -> None:
        if request in self.listeners:
            loop, queue = self.listeners[request]
            loop.call_soon_threadsafe(queue.put_nowait, (request, progress))

    def fail(self, message: str) -> None:
        """Every live and waiting request ends with ``message``; the batch starts afresh."""
        with self.wake:
            for request in list(self.listeners):
                self.tell(request, Progress(len(request.tokens), error=message))
            self.listeners.clear()
            self.engine.reset()


@dataclass
class Job:
    """One API request's inputs to a batching worker, and where its outputs go."""

    items: list[Any]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


class BatchWorker(ModelThread):
    """Runs ``predict`` (a list of inputs -> a list of outputs, one each) over the inputs
    of every request waiting when a call starts (and of those that arrive within
    ``wait_ms`` of the first), up to ``max_batch`` inputs a call. At most ``max_queue``
    inputs wait. A call that fails is repeated for each request alone, so that only the
    request at fault hears of it."""

    def __init__(
        self,
        predict: Callable[[list[Any]], list[Any]],
        max_batch: int,
        max_queue: int,
        wait_ms: float,
        use: ModelUse,
    ) -> None:
        super().__init__("batching", use)
        self.predict = predict
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.wait = wait_ms / 1000
        self.jobs: list[Job] = []

    def pending(self) -> int:
        return sum(len(job.items) for job in self.jobs)

    async def __call__(self, items: list[Any]) -> list[Any]:
        """The outputs of ``items``, computed with whatever else arrives meanwhile."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self.wake:
            if self.jobs and self.pending() + len(items) > self.max_queue:
                raise Busy(f"{self.pending()} inputs are waiting already")
            self.jobs.append(Job(items, future, loop))
            self.metrics.queue_depth.set(self.pending())
            self.wake.notify()
        return await future

    def run(self) -> None:
        with self.context():
            while (batch := self.next_batch()) is not None:
                self.metrics.batch_size.observe(sum(len(job.items) for job in batch))
                for job, outcome in self.outcomes(batch):
                    setter = job.future.set_exception
                    if not isinstance(outcome, Exception):
                        setter = job.future.set_result
                    job.loop.call_soon_threadsafe(settle, job.future, setter, outcome)

    def next_batch(self) -> list[Job] | None:
        """The jobs of the next call: the first waiting one, and those that arrive within
        ``wait_ms`` while the inputs number fewer than ``max_batch``; None once stopping."""
        with self.wake:
            while not self.jobs and not self.stopping:
                self.wake.wait()
            if self.stopping:
                return None
            deadline = time.monotonic() + self.wait
            while self.pending() < self.max_batch and (left := deadline - time.monotonic()) > 0:
                self.wake.wait(left)
            batch, size = [], 0
            while self.jobs and (not batch or size + len(self.jobs[0].items) <= self.max_batch):
                size += len(self.jobs[0].items)
                batch.append(self.jobs.pop(0))
            self.metrics.queue_depth.set(self.pending())
            return batch

    def outcomes(self, batch: list[Job]) -> Iterator[tuple[Job, Any]]:
        """Each job with its outputs, or the exception that its inputs raise."""
        items = [item for job in batch for item in job.items]
        try:
            with self.model_lock:
                outputs = self.predict(items)
        except Exception as error:  # the job at fault hears of it
            if len(batch) == 1:
                yield batch[0], error
                return
            for job in batch:
                yield from self.outcomes([job])
            return
        start = 0
        for job in batch:
            yield job, outputs[start : start + len(job.items)]
            start += len(job.items)


def settle(future: asyncio.Future, setter: Callable[[Any], None], value: Any) -> None:
    """Set ``future``'s result or exception, unless its request has gone (cancelled)."""
    if not future.done():
        setter(value)
