"""An OSB platform as the reliability suite plays it: requests with retries, polling, and a record of answers.

A platform (Cloud Foundry, Service Manager) repeats a request whose answer it did not get — a transport
error, a 5xx — and OSB makes that safe (identical repeats are 200/202). :class:`Platform` does the same,
counting every answer by operation and status code, and every retry, so a run can report them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx

RETRIED = frozenset({500, 502, 503, 504})


class Gave(Exception):
    """A request kept failing (transport errors or 5xx) until its deadline."""


@dataclass(frozen=True)
class Ids:
    service_id: str
    plan_id: str


class Platform:
    """OSB calls against one broker, safe to use from many threads."""

    def __init__(self, http: httpx.Client, ids: Ids, namespace: str) -> None:
        self.http = http
        self.ids = ids
        self.namespace = namespace
        self.answers: Counter[str] = Counter()
        self.retries: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, counter: Counter[str], key: str) -> None:
        with self._lock:
            counter[key] += 1

    def call(self, operation: str, method: str, path: str, *, deadline: float, **kwargs: Any) -> httpx.Response:
        """One OSB request, repeated after transport errors and 5xx until it gets another answer."""
        pause = 0.5
        while True:
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                self._count(self.retries, f"{operation} {type(exc).__name__}")
            else:
                self._count(self.answers, f"{operation} {response.status_code}")
                if response.status_code not in RETRIED:
                    return response
                self._count(self.retries, f"{operation} {response.status_code}")
            if time.monotonic() + pause > deadline:
                raise Gave(f"{operation} {path}: no answer but errors until the deadline")
            time.sleep(pause)
            pause = min(pause * 1.5, 3.0)

    # -- the OSB operations the suites use --------------------------------------------------------------

    def provision_body(self, **extra: Any) -> dict[str, Any]:
        return {
            "service_id": self.ids.service_id,
            "plan_id": self.ids.plan_id,
            "organization_guid": "reliability",
            "space_guid": "reliability",
            "context": {"platform": "kubernetes", "namespace": self.namespace},
            **extra,
        }

    def provision(self, instance: str, *, deadline: float, body: dict[str, Any] | None = None) -> httpx.Response:
        return self.call(
            "provision",
            "PUT",
            f"/v2/service_instances/{instance}",
            params={"accepts_incomplete": "true"},
            json=body or self.provision_body(),
            deadline=deadline,
        )

    def update(self, instance: str, parameters: dict[str, Any], *, deadline: float) -> httpx.Response:
        body = {"service_id": self.ids.service_id, "parameters": parameters}
        return self.call(
            "update",
            "PATCH",
            f"/v2/service_instances/{instance}",
            params={"accepts_incomplete": "true"},
            json=body,
            deadline=deadline,
        )

    def deprovision(self, instance: str, *, deadline: float) -> httpx.Response:
        return self.call(
            "deprovision",
            "DELETE",
            f"/v2/service_instances/{instance}",
            params=self._ids_query(),
            deadline=deadline,
        )

    def bind(
        self, instance: str, binding: str, *, deadline: float, parameters: dict[str, Any] | None = None
    ) -> httpx.Response:
        body: dict[str, Any] = {"service_id": self.ids.service_id, "plan_id": self.ids.plan_id}
        if parameters is not None:
            body["parameters"] = parameters
        return self.call(
            "bind",
            "PUT",
            f"/v2/service_instances/{instance}/service_bindings/{binding}",
            params={"accepts_incomplete": "true"},
            json=body,
            deadline=deadline,
        )

    def unbind(self, instance: str, binding: str, *, deadline: float) -> httpx.Response:
        return self.call(
            "unbind",
            "DELETE",
            f"/v2/service_instances/{instance}/service_bindings/{binding}",
            params=self._ids_query(),
            deadline=deadline,
        )

    def last_operation(self, path: str, operation: str | None, *, deadline: float) -> str:
        """Poll ``path``/last_operation until the operation finished; its final state (or ``gone``)."""
        params = {"operation": operation} if operation else {}
        while True:
            response = self.call("last_operation", "GET", f"{path}/last_operation", params=params, deadline=deadline)
            if response.status_code == 410:
                return "gone"
            if response.status_code != 200:
                raise Gave(f"last_operation {path}: HTTP {response.status_code} {response.text[:200]}")
            state = str(response.json().get("state"))
            if state == "succeeded":
                return state
            if state == "failed":  # with the broker's description: why is what a failed run needs to tell
                return f"failed: {response.json().get('description', '')}"[:300]
            if time.monotonic() + 1.0 > deadline:
                raise Gave(f"last_operation {path}: still {state!r} at the deadline")
            time.sleep(1.0)

    def _ids_query(self) -> dict[str, str]:
        return {"service_id": self.ids.service_id, "plan_id": self.ids.plan_id, "accepts_incomplete": "true"}
