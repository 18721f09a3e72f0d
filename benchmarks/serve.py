"""The server under load: ``scratchformer serve`` with continuous batching against the same
server answering one request at a time (``--max-batch 1``), side by side in one run.

    python benchmarks/serve.py            # config B's decoder and a classifier: minutes
    python benchmarks/serve.py --quick    # tiny models, a few requests: that it all runs
    python benchmarks/serve.py --no-compile   # without the compiled server's rows

Two runs are trained for one step from the shared data (their weights are random to any
purpose here, their sizes are what counts): a decoder-only language model of config B
(``benchmarks/generate.py``'s sizes, a byte-level BPE of 8,192 tokens) and an SST-2
classifier (``recipes/sst2.toml``). Each is served by ``scratchformer serve`` in a process of
its own on 127.0.0.1, loaded by clients of the official ``openai`` package (completions) or
of the light load generator of ``http_load.py`` (``/v1/classify``, whose requests are cheap
enough that a heavier client would take the machine from the server it loads) at a fixed
concurrency, each client asking again as soon as it is answered, a fixed number of requests
in all. The servers of a run are up together
and their loads alternate (A, B, A, B, ...; classification 5 times each, the median load
reported), so that drift in the machine's speed hits them alike. Reported: completion
tokens (or requests) per second over the whole load, and the median and 99th percentile of
the requests' latencies; targets: at concurrency 32, >= 4x the tokens/s of one at a time for
decoding, >= 5x the requests/s for classification. Both models are also served with
``--compile`` (its start-up, compiling, is timed), whose answers must equal the eager
server's (greedy texts; labels, and probabilities within 1e-4). ``GET /health`` under the
same load is the most requests/s this machine's HTTP stack and clients allow, whatever the
model: the ceiling of the classification ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import torch

from http_load import Load, http_load, load, request
from scratchformer.device import native_bf16

ROOT = Path(__file__).resolve().parents[1]
CONFIG_B = [
    "model.n_layers=6",
    "model.d_model=384",
    "model.n_heads=6",
    "model.d_ff=1536",
    "model.max_len=256",
    "data.tokenizer=bpe",
    "data.vocab_size=8192",
]
TINY = ["model.n_layers=1", "model.d_model=32", "model.n_heads=2", "model.d_ff=64"]
PREFIX, OWN, SHARING = 512, 16, 32
"""The prefix workload: ``SHARING`` prompts of a shared prefix of ``PREFIX`` tokens (a
system prompt, few-shot examples), each with ``OWN`` tokens of its own."""
PREFIX_TARGET = 3.0
"""The least speed-up of the mean time to first token with the prefix cache over without."""
CONCURRENCY = (1, 8, 32)
TARGETS = {"completions": 4.0, "classify": 5.0}
ENDPOINTS = tuple(TARGETS)
"""The least speed-up at concurrency 32 of continuous batching over one at a time."""
REPEATS = {"completions": 1, "classify": 5}
"""Loads of each server at each concurrency, alternating between the servers (the median's
row is reported): a classification load lasts seconds, and one-at-a-time's requests/s
moved by +-25% between single loads as the machine's other work came and went."""
PROMPTS = ["ROMEO:", "JULIET: O Romeo, Romeo!", "First Citizen:\nBefore we proceed", "KING"]
SENTENCES = ["a wonderful, moving film", "dull and far too long", "it is fine", "not for me"]


def train(run_dir: Path, recipe: str, settings: list[str]) -> None:
    """A run of ``recipe`` with ``settings``, trained one step."""
    overrides = [*settings, "train.max_steps=1", "train.eval_every=1", "train.eval_batches=1"]
    command = [
        sys.executable,
        "-m",
        "scratchformer",
        "--quiet",
        "train",
        str(ROOT / "recipes" / recipe),
    ]
    command += ["--out", str(run_dir)]
    for setting in overrides:
        command += ["--set", setting]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def served(
    run_dir: Path, max_batch: int, threads: int, compile: bool = False, *options: str
) -> Iterator[str]:
    """The base URL of ``scratchformer serve run_dir --max-batch max_batch [--compile]
    [options]``, in a process of its own, until the block ends; the start-up time is
    printed."""
    port = free_port()
    command = [sys.executable, "-m", "scratchformer", "--quiet", "serve", str(run_dir)]
    command += ["--port", str(port), "--max-batch", str(max_batch), "--max-queue", "1000"]
    command += ["--compile"] if compile else ["--no-compile"]
    command += options
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.monotonic()
    server = subprocess.Popen(command, env=environment)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = start + (900 if compile else 120)
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the server of {run_dir} did not start") from None
                time.sleep(0.2)
        print(
            f"  (the server with --max-batch {max_batch}{' --compile' * compile} started in "
            f"{time.monotonic() - start:.0f} s)"
        )
        yield url
    finally:
        server.terminate()
        server.wait(timeout=120)


def completions(url: str, concurrency: int, requests: int, max_tokens: int) -> Load:
    async def run() -> Load:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)

        async def ask(i: int) -> float:
            answer = await client.completions.create(
                model="b", prompt=PROMPTS[i % len(PROMPTS)], max_tokens=max_tokens, temperature=0
            )
            return answer.usage.completion_tokens

        await ask(0)  # warm-up: the first request's allocations
        result = await load(concurrency, requests, ask)
        await client.close()
        return result

    return asyncio.run(run())


def greedy_texts(url: str, max_tokens: int) -> list[str]:
    """The greedy completion of each of ``PROMPTS``."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    answers = [
        client.completions.create(model="b", prompt=p, max_tokens=max_tokens, temperature=0)
        for p in PROMPTS
    ]
    return [answer.choices[0].text for answer in answers]


def plain_load(url: str, concurrency: int, requests: int, path: str, body: Any = None) -> Load:
    """``requests`` POSTs to ``path``, the i-th with input ``body[i % len(body)]`` (a GET
    without a body), through the light load generator of ``http_load.py``."""
    if body is None:
        messages = [request(url, path)]
    else:
        messages = [request(url, path, {"input": each}) for each in body]
    return http_load(url, concurrency, requests, messages)


def labels(url: str) -> list[tuple[str, float]]:
    """The label of each of ``SENTENCES``, and its probability."""
    request = urllib.request.Request(
        f"{url}/v1/classify",
        json.dumps({"input": SENTENCES}).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        data = json.load(response)["data"]
    return [(d["label"], d["probability"]) for d in data]


def agree(eager: list[Any], compiled: list[Any]) -> bool:
    """Equal texts, or equal labels with probabilities within 1e-4."""
    return len(eager) == len(compiled) and all(
        a == b or (a[0] == b[0] and abs(a[1] - b[1]) < 1e-4)
        for a, b in zip(eager, compiled, strict=True)
    )


def classify(url: str, concurrency: int, requests: int) -> Load:
    return plain_load(url, concurrency, requests, "/v1/classify", SENTENCES)


def health(url: str, concurrency: int, requests: int) -> Load:
    """``GET /health`` under load: HTTP and the clients' work, no model."""
    return plain_load(url, concurrency, requests, "/health")


def first_tokens(url: str, prompts: list[list[int]], concurrency: int) -> Load:
    """Each prompt (token ids) completed with one token, ``concurrency`` at once: each
    latency is the request's time to its first token."""

    async def run() -> Load:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)

        async def ask(i: int) -> float:
            await client.completions.create(
                model="b", prompt=prompts[i], max_tokens=1, temperature=0
            )
            return 1.0

        result = await load(concurrency, len(prompts), ask)
        await client.close()
        return result

    return asyncio.run(run())


def prefix_reuse(run_dir: Path, threads: int) -> None:
    """The mean time to first token of :data:`SHARING` prompts sharing a prefix, served with
    the prefix cache and without, at concurrency 1 and 32; the same answers from both. The
    prompts are token ids drawn at random below 256 (every byte-level vocabulary has them)."""
    draw = torch.Generator().manual_seed(0)

    def tokens(count: int) -> list[int]:
        return torch.randint(1, 256, (count,), generator=draw).tolist()

    warm_up = [tokens(PREFIX + OWN)]  # (allocations; another prefix than the load's)
    means = {}
    with contextlib.ExitStack() as stack:
        urls = {
            cached: stack.enter_context(
                served(run_dir, 32, threads, False, "--prefix-cache", "8192" if cached else "0")
            )
            for cached in (True, False)
        }
        for concurrency in (1, SHARING):
            shared = tokens(PREFIX)  # (a prefix of its own for each load)
            prompts = [shared + tokens(OWN) for _ in range(SHARING)]
            for cached, url in urls.items():
                first_tokens(url, warm_up, 1)
                result = first_tokens(url, prompts, concurrency)
                means[cached, concurrency] = sum(result.latencies) / len(result.latencies)
                mode = "with the prefix cache" if cached else "without it"
                print(
                    f"prefix       {mode:30} concurrency {concurrency:2}: mean time to first "
                    f"token {means[cached, concurrency] * 1000:7.1f} ms"
                )
        check = [tokens(PREFIX) + tokens(OWN) for _ in range(2)]
        texts = {
            cached: [
                openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
                .completions.create(model="b", prompt=p, max_tokens=8, temperature=0)
                .choices[0]
                .text
                for p in check + check
            ]
            for cached, url in urls.items()
        }
    if texts[True] != texts[False]:
        raise SystemExit("the server with the prefix cache answers otherwise than without")
    print("  the answers with the prefix cache equal those without")
    for concurrency in (1, SHARING):
        ratio = means[False, concurrency] / means[True, concurrency]
        verdict = "met" if ratio >= PREFIX_TARGET else "missed"
        print(
            f"prefix, concurrency {concurrency}: mean time to first token {ratio:.2f}x better "
            f"with the prefix cache (target >= {PREFIX_TARGET}x, {verdict})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny models, a few requests")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--max-tokens", type=int, default=64, help="new tokens a request")
    parser.add_argument(
        "--endpoint",
        choices=(*ENDPOINTS, "prefix"),
        action="append",
        help="(default: all; prefix: the prefix cache's workload)",
    )
    parser.add_argument("--no-compile", action="store_true", help="leave out the compiled server")
    args = parser.parse_args()
    cpu = torch.device("cpu")
    print(
        f"CPU: {platform.processor() or platform.machine()}, "
        f"{torch.backends.cpu.get_cpu_capability()}, native bf16: {native_bf16(cpu)}, "
        f"{args.threads} threads; torch {torch.__version__}"
    )
    sizes = TINY if args.quick else []
    max_tokens = 8 if args.quick else args.max_tokens
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        lm, cls = Path(scratch) / "lm", Path(scratch) / "cls"
        runs = {
            "completions": (lm, "shakespeare-char.toml", [*CONFIG_B, "data.lm.block_size=64"]),
            "classify": (cls, "sst2.toml", []),
        }
        wanted = args.endpoint or [*ENDPOINTS, "prefix"]
        if "prefix" in wanted:  # (a context that holds the shared prefix)
            run_dir = Path(scratch) / "prefix"
            context = [f"model.max_len={PREFIX + OWN + 64}"]
            train(run_dir, "shakespeare-char.toml", [*CONFIG_B, *sizes, *context])
            prefix_reuse(run_dir, args.threads)
        for endpoint in [e for e in wanted if e != "prefix"]:
            run_dir, recipe, settings = runs[endpoint]
            train(run_dir, recipe, [*settings, *sizes])
            servers = [(32, False), (1, False)]
            if not args.no_compile:
                servers.insert(1, (32, True))
            texts = {}
            with contextlib.ExitStack() as stack:  # every server up at once: loads alternate
                urls = [
                    stack.enter_context(served(run_dir, max_batch, args.threads, compile))
                    for max_batch, compile in servers
                ]
                for concurrency in CONCURRENCY:
                    requests = (2 if args.quick else 4) * concurrency
                    repeats = 1 if args.quick else REPEATS[endpoint]
                    loads: list[list[Load]] = [[] for _ in servers]
                    for _ in range(repeats):
                        for url, results in zip(urls, loads, strict=True):
                            if endpoint == "completions":
                                results.append(completions(url, concurrency, requests, max_tokens))
                            else:
                                results.append(classify(url, concurrency, requests * 10))
                    for (max_batch, compile), results in zip(servers, loads, strict=True):
                        result = sorted(results, key=Load.rate)[len(results) // 2]
                        rows.append((endpoint, max_batch, compile, concurrency, result))
                        print_row(*rows[-1])
                for url, (max_batch, compile) in zip(urls, servers, strict=True):
                    if endpoint == "completions":
                        texts[compile] = greedy_texts(url, max_tokens)
                    else:
                        texts[compile] = labels(url)
                    if endpoint == "classify" and max_batch > 1 and not compile:
                        ceiling = health(url, CONCURRENCY[-1], 40 * CONCURRENCY[-1])
                        rows.append(("health", max_batch, compile, CONCURRENCY[-1], ceiling))
                        print_row(*rows[-1])
            if len(texts) == 2 and not agree(texts[False], texts[True]):
                raise SystemExit("the compiled server's answers differ from the eager one's")
            if len(texts) == 2:
                print("  the compiled server's answers equal the eager server's")
    print()
    top = CONCURRENCY[-1]
    at = {(e, b, c): r for e, b, c, n, r in rows if n == top}
    for endpoint in [e for e in wanted if e != "prefix"]:
        target = TARGETS[endpoint]
        ratio = at[endpoint, 32, False].rate() / at[endpoint, 1, False].rate()
        verdict = "met" if ratio >= target else "missed"
        print(
            f"{endpoint}, concurrency {top}: {ratio:.2f}x one at a time "
            f"(target >= {target}x, {verdict})"
        )
        if (endpoint, 32, True) in at:
            compiled = at[endpoint, 32, True].rate() / at[endpoint, 32, False].rate()
            print(f"{endpoint}, concurrency {top}, compiled: {compiled:.2f}x eager")
        if endpoint == "classify" and ("health", 32, False) in at:
            ceiling = at["health", 32, False].rate() / at[endpoint, 1, False].rate()
            print(f"{endpoint}: GET /health at concurrency {top} is {ceiling:.2f}x one at a time")


def print_row(endpoint: str, max_batch: int, compile: bool, concurrency: int, result: Load) -> None:
    unit = "tokens/s" if endpoint == "completions" else "requests/s"
    mode = "continuous batching" if max_batch > 1 else "one at a time"
    if endpoint != "completions" and max_batch > 1:
        mode = "micro-batching"
    mode += ", compiled" if compile else ""
    p50, p99 = (result.percentile(q) * 1000 for q in (0.5, 0.99))
    print(
        f"{endpoint:12} {mode:30} concurrency {concurrency:2}: {result.rate():8.1f} {unit}, "
        f"latency p50 {p50:7.0f} ms, p99 {p99:7.0f} ms"
    )


if __name__ == "__main__":
    main()
