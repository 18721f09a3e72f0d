"""A run made ready to serve: the model loaded once, compiled or not, and the threads that
run it (continuous batching for a language model's decoding, micro-batching for the rest),
all that the routes share."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..device import bf16_autocast, default_device, uses_bf16
from ..opening import load_run
from ..tasks.base import Task
from ..viz import attention_page, capture_attention
from .compiling import Serving, ready
from .completions import Decoding
from .errors import ApiError
from .metrics import Metrics
from .options import ServeOptions
from .tasks import Endpoint, grouped
from .workers import BatchWorker, DecodingWorker, ModelThread, ModelUse, Usage, in_a_passing_thread

TASK, EMBED, ATTENTION = "task", "embed", "attention"
"""The kinds of work of the batching worker."""
DEFAULT_CONTEXT = 2048
"""The context of a request unless ``--context`` says otherwise: an imported model's
``max_len`` can be tens of thousands of positions, which a KV cache of every row would
hold in full."""

Work = Callable[[list[Any]], list[Any]]


@dataclass
class Served:
    """A run being served: its name (the run directory's), task and model; the batching
    worker and the kinds of work it does (``work``: the task endpoint's, embeddings, the
    attention viewer, those the run has); for a language model, ``decoding``; and the
    threads to start and stop with the server."""

    name: str
    run_dir: Path
    task: Task
    model: nn.Module
    metrics: Metrics
    usage: Usage
    serving: Serving
    batched: BatchWorker
    work: dict[str, Work]
    endpoint: Endpoint | None
    decoding: Decoding | None
    threads: list[ModelThread]

    def needs(self, what: str, path: str) -> ApiError:
        """The 404 of a path that this run's task does not serve."""
        return ApiError(404, f"{self.name} is a {self.task.name!r} run: {path} needs {what}")

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        """Let the threads finish what they compute, then record the server's life in the
        ledger that the next server's choice to compile reads."""
        for thread in self.threads:
            thread.stop()
        self.serving.record(self.usage)


def serve_run(run_dir: Path, options: ServeOptions) -> Served:
    """``run_dir``'s best model, loaded, placed, compiled as ``options`` say and warmed
    up, with its threads (not started)."""
    task, model = in_a_passing_thread(lambda: load_run(run_dir, quantization=options.quantize))
    device = default_device(options.device)
    model = model.to(device)
    bf16 = uses_bf16(options.precision, device)
    computing = functools.partial(model_setting, device, bf16)
    metrics, usage = Metrics(), Usage()
    use = ModelUse(computing, threading.Lock(), metrics, usage)
    """The decoding and batching threads of a language model's server take turns on the
    model (decoding installs its kernels on it)."""
    context = request_context(task, model, options.context)
    serving = in_a_passing_thread(
        lambda: ready(
            task,
            model,
            computing,
            options.compile,
            options.verbose,
            options.max_batch,
            context,
            options.prefix_cache,
            quantize=options.quantize,
            bf16=bf16,
        )
    )
    name = run_dir.absolute().name
    threads: list[ModelThread] = []
    decoding = None
    if serving.engine is not None and context is not None:
        worker = DecodingWorker(serving.engine, options.max_queue, use)
        decoding = Decoding(
            task.tokenizer(), worker, context, name, options.timeout_s, task.chat_template
        )
        threads.append(worker)
    work = batch_work(task, model, serving, usage, name)
    batched = BatchWorker(
        functools.partial(grouped, lambda kind, inputs: work[kind[0]](inputs)),
        options.max_batch,
        options.max_queue,
        options.batch_wait_ms,
        use,
    )
    threads.append(batched)
    endpoint = Endpoint.of(task.predicts)
    return Served(
        name,
        run_dir,
        task,
        model,
        metrics,
        usage,
        serving,
        batched,
        work,
        endpoint,
        decoding,
        threads,
    )


@contextlib.contextmanager
def model_setting(device: torch.device, bf16: bool) -> Iterator[None]:
    """The setting a served model runs in, entered on the thread that runs it (autocast
    is per thread): no gradients, and bfloat16 autocast if ``bf16``."""
    with torch.no_grad(), bf16_autocast(device, bf16):
        yield


def request_context(task: Task, model: nn.Module, asked: int | None) -> int | None:
    """The positions a request of a language model's server may use: ``asked`` (``--context``)
    or the model's ``max_len``, at most :data:`DEFAULT_CONTEXT`; None for other runs."""
    if not task.decodes:
        return None
    context = asked or min(model.config.max_len, DEFAULT_CONTEXT)
    if context > model.config.max_len:
        raise ValueError(f"--context {context} exceeds the model's max_len={model.config.max_len}")
    return context


def batch_work(
    task: Task, model: nn.Module, serving: Serving, usage: Usage, name: str
) -> dict[str, Work]:
    """What the batching worker does, by kind: the task endpoint's work and embeddings
    (timed, for the ledger), if the run has them, and the attention viewer."""
    work: dict[str, Work] = {}
    if serving.predict is not None:
        work[TASK] = usage.timed(serving.predict)
    if serving.embed is not None:
        work[EMBED] = usage.timed(serving.embed)

    def viewer(text: str, target: str | None) -> str:
        return attention_page(capture_attention(task, model, text, target), f"{name}: {text}")

    work[ATTENTION] = lambda inputs: [viewer(text, target) for text, target in inputs]
    return work
