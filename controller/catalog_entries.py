"""Reconciling SFService and SFPlan: report whether the controller accepted each catalog entry.

observe reads the entry (fresh from the API: the store does not hold catalog entries) and checks it; plan is
:func:`opbroker.controller.catalog_status.status_patch` (pure); act writes the patch, guarded by the
resourceVersion the verdict was made on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import ValidationError

from opbroker.api import SFPlan, SFService
from opbroker.api.errors import field_errors
from opbroker.controller import catalog_status
from opbroker.controller.catalog_status import Verdict
from opbroker.controller.kube import PLANS, SERVICES, Kind, Kube
from opbroker.controller.reconciler import DONE, Key, ObservePlanAct, Outcome
from opbroker.rendering import Renderer
from opbroker.rendering.checking import check_plan


@dataclass(frozen=True)
class EntryFacts:
    key: Key
    body: dict[str, Any]
    verdict: Verdict


@dataclass(frozen=True)
class WriteStatus:
    patch: dict[str, Any]


class ServiceEntryReconciler(ObservePlanAct[EntryFacts, WriteStatus]):
    kind: ClassVar[str] = "service"
    resource: ClassVar[Kind] = SERVICES

    def __init__(self, kube: Kube, renderer: Renderer) -> None:
        self.kube = kube
        self.renderer = renderer

    def observe(self, key: Key) -> EntryFacts | None:
        body = self.kube.get_custom(self.resource, key.namespace, key.name, fresh=True)
        if body is None:
            return None
        return EntryFacts(key, body, self.verdict(body))

    def verdict(self, body: dict[str, Any]) -> Verdict:
        try:
            SFService.model_validate(body)
        except ValidationError as exc:
            return catalog_status.service_verdict("; ".join(field_errors(exc)))
        return catalog_status.service_verdict(None)

    @staticmethod
    def plan(facts: EntryFacts) -> Sequence[WriteStatus]:
        patch = catalog_status.status_patch(facts.body, facts.verdict)
        return () if patch is None else (WriteStatus(patch),)

    def act(self, facts: EntryFacts, actions: Sequence[WriteStatus]) -> Outcome:
        for action in actions:
            self.kube.patch_custom_status(
                self.resource,
                facts.key.namespace,
                facts.key.name,
                action.patch,
                resource_version=facts.body["metadata"]["resourceVersion"],
            )  # a 409 is a conflict: the runtime re-reads and decides again on the newer version
        return DONE


class PlanEntryReconciler(ServiceEntryReconciler):
    kind: ClassVar[str] = "plan"
    resource: ClassVar[Kind] = PLANS

    def verdict(self, body: dict[str, Any]) -> Verdict:
        try:
            model = SFPlan.model_validate(body)
        except ValidationError as exc:
            return catalog_status.plan_verdict("; ".join(field_errors(exc)))
        findings = check_plan(model, self.renderer).errors
        return catalog_status.plan_verdict(None, tuple(str(f) for f in findings))
