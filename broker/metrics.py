"""Prometheus metrics of the broker: requests by endpoint (route template), method and status code, and latency.

Every label value comes from a fixed set, whatever the request: the endpoint is one of the app's route
templates (anything else is ``unmatched``), the method one of :data:`METHODS` (anything else is ``other``), the
code a three-digit HTTP status. So the number of series is bounded by the app's routes, not by its clients: an
unauthenticated client sending 250 KB method names or random paths adds to one existing series, where the raw
values once made ``/metrics`` 250 MB (issue 25).

Each app has its own registry, so several brokers in one process (tests) do not collide; each replica
exposes its own series on ``/metrics`` and Prometheus sums across pods.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
#: The methods counted by name: OSB's, and what probes, browsers and CORS preflights send.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: The label of any other method, and of a status code outside 100 to 599.
OTHER = "other"
#: The endpoint label of a request no route matches (a random path, a known path with another method).
UNMATCHED = "unmatched"


def method_label(method: str) -> str:
    """``method`` when it is one of :data:`METHODS`, else ``other`` (HTTP parsers accept any token)."""
    return method if method in METHODS else OTHER


def code_label(code: int) -> str:
    return str(code) if 100 <= code <= 599 else OTHER


class Metrics:
    def __init__(self, endpoints: Iterable[str]) -> None:
        """``endpoints``: the route templates to count by name; any other endpoint counts as ``unmatched``."""
        self.endpoints = frozenset(endpoints)
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

    def endpoint_label(self, endpoint: str) -> str:
        return endpoint if endpoint in self.endpoints else UNMATCHED

    def observe(self, endpoint: str, method: str, code: int, seconds: float) -> None:
        endpoint, method = self.endpoint_label(endpoint), method_label(method)
        self.requests.labels(endpoint=endpoint, method=method, code=code_label(code)).inc()
        self.latency.labels(endpoint=endpoint, method=method).observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
