"""Reconciling a Broker: fetch its catalog when a relist is due, keep its ServiceClasses in step, say so.

observe reads the Broker, its auth Secret (only from the control-plane namespace: one named elsewhere is
refused, ``AuthSecretNotInControlPlane``, unread) and — only when a relist is due — the catalog and the classes
held; plan (pure) turns that into class writes and the Broker's status; act writes them. A relist is due
on a new or changed spec, a bumped ``relistRequests``, a failed last attempt, or ``relistDuration`` after
the last success (``relistBehavior: Manual`` relists on request only).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from opbroker import osbclient
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.servicecatalog import parse_go_duration
from opbroker.controller.decisions import ready_condition
from opbroker.controller.reasons import Reason
from opbroker.controller.reconciler import DONE, Key, ObservePlanAct, Outcome, requeue
from opbroker.controller.servicecatalog import relisting
from opbroker.controller.servicecatalog.endpoints import EndpointProblem, auth_secret_ref, endpoint
from opbroker.controller.servicecatalog.relisting import ClassChanges
from opbroker.controller.servicecatalog.resources import BROKERS, CLASSES, CatalogApi

logger = logging.getLogger(__name__)

#: After a failed fetch, when to try again (the runtime's error backoff is for exceptions; this is a verdict).
RETRY_SECONDS = 10.0


@dataclass(frozen=True)
class BrokerFacts:
    key: Key
    body: dict[str, Any]
    now: datetime
    due_in: float | None
    catalog: dict[str, Any] | None = None
    classes: tuple[dict[str, Any], ...] = ()
    problem: tuple[Reason, str] | None = None


@dataclass(frozen=True)
class WriteClasses:
    changes: ClassChanges


@dataclass(frozen=True)
class WriteStatus:
    status: dict[str, Any]
    event: tuple[Reason, str, bool] | None = None


@dataclass(frozen=True)
class ComeBack:
    seconds: float


BrokerAction = WriteClasses | WriteStatus | ComeBack


class BrokerReconciler(ObservePlanAct[BrokerFacts, BrokerAction]):
    kind: ClassVar[str] = "scbroker"

    def __init__(self, api: CatalogApi, *, control_plane: str = DEFAULT_NAMESPACE, transport: Any = None) -> None:
        self.api = api
        self.control_plane = control_plane
        """The only namespace a Broker's auth Secret is read from."""
        self.transport = transport

    def observe(self, key: Key) -> BrokerFacts | None:
        body = self.api.get(BROKERS, "", key.name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return None  # its classes go with it (owner references)
        now = datetime.now(UTC)
        due_in = relisting.relist_due(body, now)
        facts = BrokerFacts(key, body, now, due_in)
        if due_in is None or due_in > 0:
            return facts
        try:
            catalog = self.fetch(body)
        except EndpointProblem as exc:
            return BrokerFacts(key, body, now, due_in, problem=(exc.reason, str(exc)))
        except osbclient.BrokerError as exc:
            return BrokerFacts(key, body, now, due_in, problem=(Reason.ERROR_FETCHING_CATALOG, str(exc)))
        classes = tuple(self.api.list(CLASSES))
        return BrokerFacts(key, body, now, due_in, catalog=catalog, classes=classes)

    def fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        ref = auth_secret_ref(body["spec"], control_plane=self.control_plane)  # raises before any read
        secret = self.api.secret_data(ref[1], ref[2]) if ref else None
        with osbclient.Client(endpoint(body["spec"], secret), transport=self.transport) as client:
            return client.catalog()

    @staticmethod
    def plan(facts: BrokerFacts) -> Sequence[BrokerAction]:
        body = facts.body
        meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
        if facts.due_in is not None and facts.due_in > 0:
            return (ComeBack(facts.due_in),)
        if facts.due_in is None and facts.catalog is None and facts.problem is None:
            return ()
        base = {"observedGeneration": meta.get("generation"), "reconciledRelistRequests": spec.get("relistRequests", 0)}
        if facts.problem is not None:
            reason, message = facts.problem
            conditions = ready_condition(
                status.get("conditions"), ready=False, reason=reason, message=message, generation=meta.get("generation")
            )
            return (
                WriteStatus({**base, "conditions": conditions}, event=(reason, message, True)),
                ComeBack(RETRY_SECONDS),
            )
        assert facts.catalog is not None
        changes = relisting.class_changes(body, facts.catalog, facts.classes)
        count = len(facts.catalog.get("services") or []) - len(changes.conflicts)
        message = f"fetched the catalog: {count} service class(es)"
        if changes.conflicts:
            message += "; not offered (a class of that name belongs to another broker): " + ", ".join(changes.conflicts)
        conditions = ready_condition(
            status.get("conditions"),
            ready=True,
            reason=Reason.FETCHED_CATALOG,
            message=message,
            generation=meta.get("generation"),
        )
        new_status = {
            **base,
            "conditions": conditions,
            "lastCatalogRetrievalTime": relisting.now_text(facts.now),
            "serviceClassCount": count,
        }
        event = (Reason.CLASS_NAME_CONFLICT, message, True) if changes.conflicts else None
        actions: list[BrokerAction] = [WriteClasses(changes), WriteStatus(new_status, event=event)]
        if spec.get("relistBehavior", "Duration") == "Duration":
            actions.append(ComeBack(parse_go_duration(spec.get("relistDuration") or "15m").total_seconds()))
        return actions

    def act(self, facts: BrokerFacts, actions: Sequence[BrokerAction]) -> Outcome:
        outcome = DONE
        for action in actions:
            if isinstance(action, ComeBack):
                outcome = requeue(max(action.seconds, 0.5))
            elif isinstance(action, WriteClasses):
                self._write_classes(action.changes)
            else:
                self.api.patch_status(BROKERS, facts.body, action.status)
                if action.event is not None:
                    reason, message, warning = action.event
                    self.api.kube.emit_event(facts.body, reason=reason.value, message=message, warning=warning)
        return outcome

    def _write_classes(self, changes: ClassChanges) -> None:
        for body in changes.create:
            self.api.create(CLASSES, body)
        for body in changes.update:
            self.api.patch(CLASSES, "", body["metadata"]["name"], _replacement_patch(body))
        for name in changes.removed:
            held = self.api.get(CLASSES, "", name)
            if held is not None:
                self.api.patch_status(CLASSES, held, {"removedFromBrokerCatalog": True}, guarded=False)
        for name in changes.restored:
            held = self.api.get(CLASSES, "", name)
            if held is not None:
                self.api.patch_status(CLASSES, held, {"removedFromBrokerCatalog": False}, guarded=False)


def _replacement_patch(body: dict[str, Any]) -> dict[str, Any]:
    """A merge patch making the class's top-level fields those of ``body`` (guarded by its version)."""
    patch = {k: v for k, v in body.items() if k not in ("status", "apiVersion", "kind", "metadata")}
    for key in ("tags", "requires", "externalMetadata"):
        patch.setdefault(key, None)
    patch["metadata"] = {"resourceVersion": body["metadata"]["resourceVersion"]}
    return patch
