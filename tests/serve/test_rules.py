"""What every request meets, and faults: the API key, the queue's bound, the body-size
limit, malformed bodies, metrics, a client that leaves mid-stream, load, SIGTERM, and the
page."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from helpers import http, live
from scratchformer.cli import build_parser, main
from scratchformer.inference import Engine
from scratchformer.serve import ServeOptions


def test_an_api_key_is_needed_except_for_health(lm_run) -> None:
    with live(lm_run, api_key="s3cret") as url:
        body = {"prompt": "to", "max_tokens": 2}
        status, answer = http(f"{url}/v1/completions", body)
        assert status == 401 and answer["error"]["type"] == "authentication_error"
        assert http(f"{url}/v1/completions", body, {"Authorization": "Bearer wrong"})[0] == 401
        assert http(f"{url}/v1/completions", body, {"Authorization": "Bearer s3cret"})[0] == 200
        assert http(f"{url}/health")[0] == 200


def test_malformed_bodies_are_400s_naming_the_field(lm_url) -> None:
    url = f"{lm_url}/v1/completions"
    status, answer = http(url, b"{not json")
    assert status == 400 and answer["error"]["type"] == "invalid_request_error"
    assert answer["error"]["param"] == "body" and "Invalid JSON" in answer["error"]["message"]
    status, answer = http(url, {"prompt": "to", "max_tokens": "many"})
    assert status == 400 and answer["error"]["param"] == "max_tokens"
    status, answer = http(url, {"prompt": "to", "n": 0})
    assert status == 400 and answer["error"]["param"] == "n"
    status, answer = http(url, {"max_tokens": 3})
    assert status == 400 and answer["error"]["param"] == "prompt"
    status, answer = http(url, {"prompt": [[1, 2, 999999]]})
    assert status == 400 and "token ids go from 0 to" in answer["error"]["message"]


def test_a_body_over_the_limit_is_a_413_that_the_client_reads(lm_url) -> None:
    """5 MB, over the default limit of 4 MB: urllib (which sends the whole body, then reads)
    and OpenAI's client read a 413 in OpenAI's shape, not a reset connection; a client that
    asks for ``100 Continue`` gets the 413 before it sends any of the body."""
    body = {"prompt": "to be " * 900_000}
    expected = {
        "message": "the body is over the limit of 4000000 bytes",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    assert http(f"{lm_url}/v1/completions", body) == (413, {"error": expected})
    client = openai.OpenAI(base_url=f"{lm_url}/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.APIStatusError, match="over the limit") as raised:
        client.completions.create(model="lm", **body)
    assert raised.value.status_code == 413 and raised.value.body == expected
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 5000000\r\nExpect: 100-continue\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", int(lm_url.rsplit(":", 1)[1]))) as client_:
        client_.settimeout(10)
        client_.sendall(head.encode())
        answer = client_.makefile("rb").read()  # (the server closes: nothing else to send)
    status_line, _, answer_body = answer.partition(b"\r\n\r\n")
    assert status_line.startswith(b"HTTP/1.1 413 ") and json.loads(answer_body)["error"] == expected


def test_a_full_queue_answers_429_with_retry_after(lm_run) -> None:
    with live(lm_run, max_batch=1, max_queue=1) as url:
        body = json.dumps({"prompt": "to", "max_tokens": 50, "temperature": 0}).encode()

        def ask(_: int) -> tuple[int, str | None]:
            request = urllib.request.Request(
                f"{url}/v1/completions", body, {"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return response.status, None
            except urllib.error.HTTPError as error:
                return error.code, error.headers.get("Retry-After")

        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(ask, range(12)))
        statuses = [status for status, _ in answers]
        assert set(statuses) <= {200, 429} and statuses.count(429) >= 1
        assert all(retry == "1" for status, retry in answers if status == 429)


TOKENS = 60
"""The new tokens asked for by the requests that leave early: a request not cut short takes
``TOKENS - 1`` decoding steps (the first step draws two tokens, one from the prompt)."""


@pytest.fixture
def slow_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every decoding step takes 50 ms more, so that a request of :data:`TOKENS` tokens
    lasts seconds, and is counted: the list gets the number of live requests after each."""
    taken: list[int] = []
    step = Engine.step

    def slow_step(self: Engine) -> list:
        time.sleep(0.05)
        moved = step(self)
        taken.append(len(self.live))
        return moved

    monkeypatch.setattr(Engine, "step", slow_step)
    return taken


def until(condition: Callable[[], object]) -> None:
    """Poll ``condition`` until it holds; a minute without it fails (a server that hangs)."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "a minute passed"
        time.sleep(0.02)


def steps_until_idle(url: str, steps: list[int]) -> int:
    """The decoding steps taken by the time the server at ``url`` runs no request."""
    until(lambda: http(f"{url}/health")[1]["running"] == 0)
    return len(steps)


def test_a_client_that_leaves_mid_stream_frees_its_row(lm_run, slow_steps) -> None:
    with live(lm_run, max_batch=2) as url:
        assert http(f"{url}/health")[1]["running"] == 0
        body = {"prompt": "to", "max_tokens": TOKENS, "temperature": 0, "stream": True}
        request = urllib.request.Request(
            f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        response = urllib.request.urlopen(request, timeout=60)
        assert response.readline().startswith(b"data: ")
        assert http(f"{url}/health")[1]["running"] == 1
        response.close()
        assert steps_until_idle(url, slow_steps) < TOKENS - 1  # (cut short)


def test_a_client_that_leaves_before_a_whole_answer_frees_its_row(lm_run, slow_steps) -> None:
    with live(lm_run, max_batch=2) as url:
        body = json.dumps({"prompt": "to", "max_tokens": TOKENS, "temperature": 0}).encode()
        head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            until(lambda: slow_steps)  # (the request has joined the batch)
            assert slow_steps[0] == 1
        assert steps_until_idle(url, slow_steps) < TOKENS - 1  # (cut short)
        assert 'status="499"' in urllib.request.urlopen(f"{url}/metrics").read().decode()


def test_a_request_past_its_timeout_is_a_504_and_frees_its_row(lm_run, slow_steps) -> None:
    with live(lm_run, timeout_s=0.5) as url:
        body = {"prompt": "to", "max_tokens": TOKENS, "temperature": 0}  # greedy: no early eos
        status, answer = http(f"{url}/v1/completions", body)
        assert status == 504 and "no answer within 0.5 s" in answer["error"]["message"]
        assert steps_until_idle(url, slow_steps) < TOKENS - 1  # (cut short)


def test_metrics_count_requests_tokens_and_batches(lm_url) -> None:
    http(f"{lm_url}/v1/completions", {"prompt": "to", "max_tokens": 3, "temperature": 0})
    assert http(f"{lm_url}/no/such/path")[0] == 404
    with urllib.request.urlopen(f"{lm_url}/metrics") as response:
        text = response.read().decode()
    assert 'scratchformer_requests_total{endpoint="/v1/completions",status="200"}' in text
    assert 'scratchformer_requests_total{endpoint="other",status="404"}' in text  # (not its path)
    assert "scratchformer_generated_tokens_total" in text
    assert "scratchformer_batch_size_bucket" in text
    assert "scratchformer_request_seconds_bucket" in text


def test_load_of_64_clients_gets_only_200s_and_429s_and_memory_stays_flat(lm_run) -> None:
    bodies = [
        {"prompt": "to be", "max_tokens": 8, "temperature": 0},
        {"prompt": "whether", "max_tokens": 3, "stream": True},
        {"prompt": "or", "max_tokens": 100000},
        {"prompt": 5},
        b"[[",
    ]
    with live(lm_run, max_batch=8, max_queue=16) as url:

        def round_() -> list[int]:
            with ThreadPoolExecutor(64) as pool:
                return list(
                    pool.map(
                        lambda i: (
                            http(f"{url}/v1/completions", bodies[i % 5])[0]
                            if i % 5 != 1
                            else stream_status(url, bodies[1])
                        ),
                        range(128),
                    )
                )

        rounds = [round_()]
        memory = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rounds += [round_(), round_()]
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - memory) / 1024
        for statuses in rounds:
            assert set(statuses) <= {200, 400, 429}, statuses
            assert statuses.count(200) > 0
        assert grown_mb < 50
        assert http(f"{url}/health")[1]["running"] == 0


def stream_status(url: str, body: dict) -> int:
    request = urllib.request.Request(
        f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            lines = response.read().decode().split("\n\n")
            assert lines[-2] == "data: [DONE]"
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_sigterm_finishes_the_requests_in_flight_then_exits(lm_run, tmp_path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "scratchformer", "--quiet", "serve", str(lm_run)]
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen([*command, "--port", str(port)], stderr=log)
    try:
        deadline = time.monotonic() + 60
        while not healthy(url):
            assert time.monotonic() < deadline and server.poll() is None, "the server did not start"
            time.sleep(0.2)
        body = {"prompt": "to", "max_tokens": 60, "temperature": 0, "stream": True}
        request = urllib.request.Request(
            f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            first = response.readline()  # the request is in flight
            server.send_signal(signal.SIGTERM)
            rest = response.read().decode()
        assert first.startswith(b"data: ") and rest.rstrip().endswith("data: [DONE]")
        # uvicorn, done, raises the signal again: the exit status says what stopped it
        assert server.wait(timeout=60) in (0, -signal.SIGTERM)
        assert not healthy(url)
    finally:
        if server.poll() is None:
            server.kill()
        log.close()


def healthy(url: str) -> bool:
    try:
        return http(f"{url}/health")[0] == 200
    except OSError:
        return False


def test_the_page_escapes_the_run_name(lm_run, tmp_path) -> None:
    odd = tmp_path / "<script>odd"
    os.symlink(lm_run, odd)
    with live(odd) as url, urllib.request.urlopen(f"{url}/") as response:
        page = response.read().decode()
    assert "<script>odd" not in page and "&lt;script&gt;odd" in page
    assert "/v1/completions" in page


def test_an_address_that_cannot_be_had_is_refused_before_the_run_loads(capsys) -> None:
    """The socket is bound before the run loads (here there is none to load): a taken port
    or an address not of this machine is one line naming the option, not uvicorn's log."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for host, reason in [("127.0.0.1", "in use"), ("1.2.3.4", "assign requested address")]:
            assert main(["--quiet", "serve", "no-run", "--host", host, "--port", port]) == 2
            err = capsys.readouterr().err
            assert err.startswith(
                f"scratchformer: error: cannot listen on --host '{host}' --port {port}: "
            )
            assert reason in err and len(err.splitlines()) == 1


def test_the_python_options_default_to_the_commands() -> None:
    """``ServeOptions()`` serves as ``scratchformer serve RUN`` does (fp32 unless asked)."""
    args = build_parser().parse_args(["serve", "run"])
    defaults = ServeOptions()
    for field in ("quantize", "compile", "precision", "device", "api_key", "max_batch"):
        assert getattr(defaults, field) == getattr(args, field), field
    assert (defaults.max_queue, defaults.timeout_s, defaults.context) == (
        args.max_queue,
        args.timeout,
        args.context,
    )
