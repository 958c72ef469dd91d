"""Prometheus metrics of the broker: requests by endpoint (route template) and status code, and latency.

Each app has its own registry, so several brokers in one process (tests) do not collide; each replica
exposes its own series on ``/metrics`` and Prometheus sums across pods.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "opbroker_broker_requests",
            "OSB broker HTTP requests, by endpoint (route template), method and status code.",
            ["endpoint", "method", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "opbroker_broker_request_duration_seconds",
            "Time to answer an OSB broker HTTP request, by endpoint and method.",
            ["endpoint", "method"],
            buckets=BUCKETS,
            registry=self.registry,
        )

    def observe(self, endpoint: str, method: str, code: int, seconds: float) -> None:
        self.requests.labels(endpoint=endpoint, method=method, code=str(code)).inc()
        self.latency.labels(endpoint=endpoint, method=method).observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
