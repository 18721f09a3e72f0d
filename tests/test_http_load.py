"""The load generator of ``benchmarks/serve.py`` (``benchmarks/http_load.py``) against a
keep-alive HTTP/1.1 server of the standard library: every request sent is answered and
counted, bodies are framed by their Content-Length across reads, and an answer other than
200 stops the load with the status and body."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


class Echo(BaseHTTPRequestHandler):
    """``POST /echo``: the JSON body back, padded to several reads; anything else: 404."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(body)
        status = 200 if self.path == "/echo" else 404
        self.answer(status, json.dumps({"got": body, "padding": "x" * 100_000}).encode())

    def do_GET(self) -> None:
        self.answer(200, b'{"status": "ok"}')

    def answer(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def url(monkeypatch) -> Iterator[str]:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    Echo.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def in_a_thread(*args: Any) -> Any:
    """``http_load(*args)`` in a thread of its own: a test before this one may have left an
    event loop running in the main thread (Playwright's), where ``asyncio.run`` refuses."""
    from http_load import http_load

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(http_load, *args).result()


def test_every_request_is_answered_and_counted(url: str) -> None:
    from http_load import request

    messages = [request(url, "/echo", {"input": text}) for text in ("a", "bb", "ccc")]
    result = in_a_thread(url, 4, 30, messages)
    assert result.units == 30 and len(result.latencies) == 30
    assert result.rate() > 0 and result.percentile(0.99) >= result.percentile(0.5)
    inputs = [body["input"] for body in Echo.seen]
    assert len(inputs) == 31  # the warm-up's, then the load's in turn
    assert sorted(inputs[1:]) == sorted(["a", "bb", "ccc"] * 10)


def test_a_get_without_a_body(url: str) -> None:
    from http_load import request

    assert in_a_thread(url, 2, 5, [request(url, "/health")]).units == 5


def test_an_answer_other_than_200_stops_the_load(url: str) -> None:
    from http_load import request

    with pytest.raises(RuntimeError, match=r"answered 404: b'\{\"got\""):
        in_a_thread(url, 2, 5, [request(url, "/missing", {"input": "a"})])


def test_a_response_without_a_length_is_refused(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from http_load import status_and_length

    assert status_and_length(b"HTTP/1.1 429 Too Many\r\ncontent-length: 12") == (429, 12)
    with pytest.raises(ValueError, match="without a Content-Length"):
        status_and_length(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked")
