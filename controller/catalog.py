"""The in-memory catalog: every SFService and SFPlan the controller has seen, by OSB id.

Fed by watch events, read by the reconcilers. Plans are kept both as raw wire dicts (what templates
see as ``plan``) and as validated models (what the renderer and the decisions use). A plan that does not
validate is remembered as invalid with the reason, so instances of it fail with that reason instead of
"plan not found".
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from opbroker.api import SFPlan, SFService
from opbroker.api.errors import field_errors


def spec_hash(spec: dict[str, Any]) -> str:
    """A stable hash of a spec (canonical JSON), used to notice plan changes."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class PlanEntry:
    body: dict[str, Any]
    model: SFPlan | None
    problem: str | None
    hash: str


@dataclass(frozen=True)
class ServiceEntry:
    body: dict[str, Any]
    model: SFService | None
    problem: str | None


class Catalog:
    """Thread-safe map of OSB ids to the latest plan/service bodies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: dict[str, PlanEntry] = {}
        self._services: dict[str, ServiceEntry] = {}
        self._plan_keys: dict[tuple[str, str], str] = {}
        self._service_keys: dict[tuple[str, str], str] = {}

    @staticmethod
    def _key(body: dict[str, Any]) -> tuple[str, str]:
        meta = body["metadata"]
        return meta.get("namespace", ""), meta["name"]

    def upsert_plan(self, body: dict[str, Any]) -> PlanEntry:
        try:
            model: SFPlan | None = SFPlan.model_validate(body)
            problem = None
        except ValidationError as exc:
            model, problem = None, "; ".join(field_errors(exc))
        plan_id = (body.get("spec") or {}).get("id") or body["metadata"]["name"]
        entry = PlanEntry(body=body, model=model, problem=problem, hash=spec_hash(body.get("spec") or {}))
        with self._lock:
            self._plans[plan_id] = entry
            self._plan_keys[self._key(body)] = plan_id
        return entry

    def remove_plan(self, body: dict[str, Any]) -> None:
        with self._lock:
            plan_id = self._plan_keys.pop(self._key(body), None)
            if plan_id is not None:
                self._plans.pop(plan_id, None)

    def upsert_service(self, body: dict[str, Any]) -> ServiceEntry:
        try:
            model: SFService | None = SFService.model_validate(body)
            problem = None
        except ValidationError as exc:
            model, problem = None, "; ".join(field_errors(exc))
        service_id = (body.get("spec") or {}).get("id") or body["metadata"]["name"]
        entry = ServiceEntry(body=body, model=model, problem=problem)
        with self._lock:
            self._services[service_id] = entry
            self._service_keys[self._key(body)] = service_id
        return entry

    def remove_service(self, body: dict[str, Any]) -> None:
        with self._lock:
            service_id = self._service_keys.pop(self._key(body), None)
            if service_id is not None:
                self._services.pop(service_id, None)

    def plan(self, plan_id: str) -> PlanEntry | None:
        with self._lock:
            return self._plans.get(plan_id)

    def service(self, service_id: str) -> ServiceEntry | None:
        with self._lock:
            return self._services.get(service_id)

    def plans(self) -> Iterable[PlanEntry]:
        with self._lock:
            return list(self._plans.values())
