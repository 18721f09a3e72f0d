"""The server's measurements, in Prometheus' text format at ``GET /metrics``: requests
by endpoint and status, their latency, tokens generated, the queue's depth and the size of
each batch the model runs. Each app keeps its own registry, so that two servers in one
process (the tests) count apart."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class Metrics:
    """The counters of one server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "scratchformer_requests",
            "HTTP requests answered, by endpoint and status code",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "scratchformer_request_seconds",
            "Time from a request's arrival to the end of its answer",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            "scratchformer_generated_tokens", "Tokens generated", registry=self.registry
        )
        self.queue_depth = Gauge(
            "scratchformer_queue_depth",
            "Requests (decoding) or inputs (other endpoints) waiting for the model",
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "scratchformer_batch_size",
            "Requests that moved on in a decoding step, or inputs in a batched call",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )

        self._answered: dict[tuple[str, int], tuple[Any, Any]] = {}

    def answered(self, endpoint: str, status: int, seconds: float) -> None:
        """Count a request answered with ``status``, and its latency. (The labelled children
        are kept: looking them up costs a busy server's event loop more than counting.)"""
        children = self._answered.get((endpoint, status))
        if children is None:
            children = self.requests.labels(endpoint, str(status)), self.latency.labels(endpoint)
            self._answered[endpoint, status] = children
        children[0].inc()
        children[1].observe(seconds)

    def text(self) -> bytes:
        return generate_latest(self.registry)
