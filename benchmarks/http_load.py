"""A light load generator for HTTP servers, as wrk is: keep-alive connections, one request
in flight on each, every client asking again as soon as it is answered.

It speaks just the HTTP/1.1 a benchmark needs (requests prepared once, each response framed
by its Content-Length) on asyncio's protocols rather than through a client library, because
the clients of ``benchmarks/serve.py`` share the machine with the server they load, and
what they take of it the server does not get (docs/lab-notes.md, "A load generator that
leaves the server the machine").
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Load:
    """A load's outcome: units done (tokens or requests), its wall time, each latency."""

    units: float
    seconds: float
    latencies: list[float]

    def rate(self) -> float:
        return self.units / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def load(concurrency: int, requests: int, ask: Callable[[int], Awaitable[float]]) -> Load:
    """``requests`` calls of ``ask(i)`` (each returning its units), ``concurrency`` at once."""
    latencies: list[float] = []
    units = 0.0
    counter = iter(range(requests))

    async def client() -> None:
        nonlocal units
        for i in counter:
            start = time.perf_counter()
            done = await ask(i)  # (``units += await ...`` would read units before waiting)
            units += done
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return Load(units, time.perf_counter() - start, latencies)


def request(url: str, path: str, body: Any = None) -> bytes:
    """A keep-alive ``GET path``, or with ``body`` a ``POST path`` of it as JSON."""
    host = urlsplit(url).netloc
    if body is None:
        return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


def status_and_length(head: bytes) -> tuple[int, int]:
    """The status and Content-Length of a response's head (its bytes before the blank line)."""
    status_line, *fields = head.split(b"\r\n")
    for field in fields:
        name, _, value = field.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(status_line.split()[1]), int(value)
    raise ValueError(f"a response without a Content-Length: {status_line!r}")


class Connection(asyncio.Protocol):
    """A keep-alive connection: :meth:`ask` sends a request and returns the response's
    status and body."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.received = bytearray()
        self.answer: asyncio.Future[tuple[int, bytes]] | None = None
        self.status = 0
        self.body: tuple[int, int] | None = None
        """Where the awaited response's body starts and ends in ``received``, once its head
        has arrived."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, error: Exception | None) -> None:
        if self.answer is not None and not self.answer.done():
            closed = ConnectionError(f"the server closed the connection ({error})")
            self.answer.set_exception(closed)

    def data_received(self, data: bytes) -> None:
        self.received += data
        if self.body is None:
            head_end = self.received.find(b"\r\n\r\n")
            if head_end < 0:
                return
            self.status, length = status_and_length(bytes(self.received[:head_end]))
            self.body = (head_end + 4, head_end + 4 + length)
        start, end = self.body
        if len(self.received) >= end and self.answer is not None:
            body = bytes(self.received[start:end])
            del self.received[:end]
            self.body = None
            self.answer.set_result((self.status, body))

    async def ask(self, message: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self.answer = asyncio.get_running_loop().create_future()
        self.transport.write(message)
        return await self.answer


def http_load(url: str, concurrency: int, requests: int, messages: list[bytes]) -> Load:
    """``requests`` requests, the i-th ``messages[i % len(messages)]``, through
    ``concurrency`` connections to ``url``, each to be answered 200 (the first message once
    before, as a warm-up); a request's unit is 1."""

    async def run() -> Load:
        loop = asyncio.get_running_loop()
        address = urlsplit(url)
        idle: list[Connection] = []
        for _ in range(concurrency):
            _, connection = await loop.create_connection(Connection, address.hostname, address.port)
            idle.append(connection)
        every = list(idle)

        async def ask(i: int) -> float:
            connection = idle.pop()
            try:
                status, body = await connection.ask(messages[i % len(messages)])
            finally:
                idle.append(connection)
            if status != 200:
                raise RuntimeError(f"{url} answered {status}: {body[:200]!r}")
            return 1.0

        try:
            await ask(0)
            return await load(concurrency, requests, ask)
        finally:
            for connection in every:
                assert connection.transport is not None
                connection.transport.close()

    return asyncio.run(run())
