"""Waiting for a controller to have handled what a test just did, read from its ``/metrics`` (issue 45).

"Nothing happens" cannot be waited for, but "the controller has looked and is done" can: its reconcile count
(``opbroker_reconcile_seconds_count``, per kind) has moved past what it was before the change, and its queue has
nothing due and nothing in flight (``opbroker_workqueue_due`` / ``_in_flight``; keys waiting for a later resync do
not count, as in ``bench/restart.py``'s ``wait_idle``). A test then asserts that nothing changed, instead of
sleeping a fixed number of seconds and hoping the controller had its turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.waiting import wait_for


@dataclass(frozen=True)
class Progress:
    """What a controller has done so far: reconciles finished, by kind; keys due now; keys being reconciled."""

    reconciles: Mapping[str, float]
    due: float
    in_flight: float

    def reconciled(self, kind: str) -> float:
        return self.reconciles.get(kind, 0.0)

    @property
    def idle(self) -> bool:
        return not self.due and not self.in_flight


def progress(port: int) -> Progress:
    """The controller's progress, scraped from its metrics port."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    reconciles: dict[str, float] = {}
    gauges: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "opbroker_reconcile_seconds_count":
                reconciles[sample.labels["kind"]] = sample.value
            elif sample.name in ("opbroker_workqueue_due", "opbroker_workqueue_in_flight"):
                gauges[sample.name] = sample.value
    due, in_flight = (gauges.get(f"opbroker_workqueue_{name}", 0.0) for name in ("due", "in_flight"))
    return Progress(reconciles, due, in_flight)


def wait_handled(port: int, before: Progress, kind: str, timeout: float = 30.0, what: str = "") -> Progress:
    """Wait until the controller has finished more reconciles of ``kind`` than at ``before`` (taken before the
    change the test made) and then has nothing due nor in flight: the change has been seen and acted on."""

    def handled() -> Progress | None:
        now = progress(port)
        return now if now.reconciled(kind) > before.reconciled(kind) and now.idle else None

    found: Progress = wait_for(handled, timeout, what or f"the controller to reconcile a {kind} and go idle")
    return found
