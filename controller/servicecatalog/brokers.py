"""Reconciling a Broker: fetch its catalog when a relist is due, keep its ServiceClasses in step, say so.

observe reads the Broker, its auth Secret (only from the control-plane namespace: one named elsewhere is
refused, ``AuthSecretNotInControlPlane``, unread) and — only when a relist is due — the catalog and the classes
held; plan (pure) turns that into class writes and the Broker's status; act only runs those actions through the
one executor (the class writes are an effect whose refusals the pure :func:`relisted` turns into the status
written after them). A relist is due
on a new or changed spec, a bumped ``relistRequests``, a failed last attempt, or ``relistDuration`` after
the last success (``relistBehavior: Manual`` relists on request only).

The fetch speaks the version :func:`relisting.version_to_speak` picks and records the one the broker accepted
(``status.brokerAPIVersion``). One odd entry never hides the rest: services and plans that cannot be read or
represented are skipped, the others become classes, and condition ``CatalogComplete`` plus a warning event
name each one skipped (service, plan, field). A class the API server still refuses (400, 413, 422: the same
object would be refused again) is reported the same way after the writes, never retried hot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any, ClassVar

from kubernetes.client.exceptions import ApiException

from opbroker import osbclient
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.servicecatalog import parse_go_duration
from opbroker.controller.core import actions as a
from opbroker.controller.core import refusals
from opbroker.controller.core.conditions import Condition, with_conditions
from opbroker.controller.core.decisions import ready_condition
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.shown_failures import broker_message
from opbroker.controller.core.views import ConditionView, Meta, condition_wire, conditions_of
from opbroker.controller.executor import Executor, Run, Target
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.outcomes import Outcome
from opbroker.controller.runtime.policies import DEFAULTS, Policies
from opbroker.controller.servicecatalog import relisting
from opbroker.controller.servicecatalog.core.endpoints import EndpointProblem, auth_secret_ref, endpoint
from opbroker.controller.servicecatalog.core.views import BrokerView, ServiceClassView
from opbroker.controller.servicecatalog.relisting import ClassChanges
from opbroker.controller.servicecatalog.resources import BROKERS, CLASSES, KINDS, CatalogApi
from opbroker.controller.showing import ShowsFailuresOnObject
from opbroker.kubeclient.wire import JsonBody, JsonObject, text_of

logger = logging.getLogger(__name__)

#: At most this many problems are named in a condition or event (both are cut at 1 KiB anyway); the count says
#: how many more there were.
NAMED_PROBLEMS = 8
CATALOG_COMPLETE = "CatalogComplete"


@dataclass(frozen=True)
class BrokerFacts:
    key: Key
    broker: BrokerView
    now: datetime
    due_in: float | None
    catalog: osbclient.catalog.Catalog | None = None
    classes: tuple[ServiceClassView, ...] = ()
    problem: tuple[Reason, str] | None = None
    spoken: str | None = None
    """The OSB version the broker accepted for the fetch."""
    retry_in: float = DEFAULTS.broker_catalog.base
    """After a failed fetch, when to try again: the policy table's ``broker_catalog``, jittered by the edge."""


@dataclass(frozen=True)
class WriteClasses:
    """Write the classes of a relist; ``then``: the pure continuation that turns the ones the API server
    refused for good into the actions that follow (:func:`relisted`)."""

    changes: ClassChanges
    then: Callable[[list[osbclient.catalog.Problem], JsonObject], Sequence[Any]] | None = field(
        default=None, compare=False, repr=False
    )


#: The shortest wait before a Broker is looked at again (a relist due "now" must not make a busy loop).
MIN_COME_BACK = 0.5


def come_back(seconds: float) -> a.Requeue:
    return a.Requeue(max(seconds, MIN_COME_BACK))


class BrokerReconciler(ShowsFailuresOnObject, ObservePlanAct[BrokerFacts, Any]):
    kind: ClassVar[str] = "scbroker"

    def __init__(
        self,
        api: CatalogApi,
        *,
        control_plane: str = DEFAULT_NAMESPACE,
        transport: Any = None,
        clock: Clock = SYSTEM,
        policies: Policies = DEFAULTS,
    ) -> None:
        self.api = api
        self.policies = policies
        """The timing table: a failed fetch is tried again after its ``broker_catalog``."""
        self.clock = clock
        """The runtime's: a relist is due by its wall clock (``status.lastCatalogRetrievalTime``)."""
        self.control_plane = control_plane
        """The only namespace a Broker's auth Secret is read from."""
        self.transport = transport
        target = Target(api.kube, KINDS[BROKERS], self.kind)
        self.executor = Executor(target, {WriteClasses: self._write})

    def observe(self, key: Key) -> BrokerFacts | None:
        body = self.api.get(BROKERS, "", key.name)
        if body is None:
            return None
        broker = BrokerView.of(body)
        if broker.meta.deleting:
            return None  # its classes go with it (owner references)
        now = self.clock.now()
        due_in = relisting.relist_due(broker, now)
        facts = BrokerFacts(key, broker, now, due_in)
        if due_in is None or due_in > 0:
            return facts
        try:
            catalog, spoken = self.fetch(broker)
        except EndpointProblem as exc:
            problem = (exc.reason, str(exc))
        except osbclient.BrokerError as exc:
            problem = (Reason.ERROR_FETCHING_CATALOG, broker_message(exc))
        else:
            classes = tuple(ServiceClassView.of(c) for c in self.api.list(CLASSES))
            return BrokerFacts(key, broker, now, due_in, catalog=catalog, classes=classes, spoken=spoken)
        retry_in = self.policies.delay(self.policies.broker_catalog)
        return BrokerFacts(key, broker, now, due_in, problem=problem, retry_in=retry_in)

    def fetch(self, broker: BrokerView) -> tuple[osbclient.catalog.Catalog, str]:
        """The catalog, read entry by entry, and the OSB version the broker accepted."""
        ref = auth_secret_ref(broker.spec, control_plane=self.control_plane)  # raises before any read
        secret = self.api.secret_data(ref.namespace, ref.name) if ref else None
        start = relisting.version_to_speak(broker)
        with osbclient.Client(endpoint(broker.spec, secret, version=start), transport=self.transport) as client:
            return client.read_catalog(), client.version

    @staticmethod
    def plan(facts: BrokerFacts) -> Sequence[Any]:
        broker = facts.broker
        generation, spec = broker.meta.generation, broker.spec
        held = [condition_wire(c) for c in broker.conditions]
        if facts.due_in is not None and facts.due_in > 0:
            return (come_back(facts.due_in),)
        if facts.due_in is None and facts.catalog is None and facts.problem is None:
            return ()
        base = {"observedGeneration": generation, "reconciledRelistRequests": spec.relist_requests}
        if facts.problem is not None:
            reason, message = facts.problem
            conditions = ready_condition(
                held, ready=False, reason=reason, message=message, generation=generation, at=facts.now
            )
            event = a.Event(reason.value, message, warning=True)
            return (a.WriteStatus({**base, "conditions": conditions}, event=event), come_back(facts.retry_in))
        assert facts.catalog is not None
        changes = relisting.class_changes(broker, facts.catalog.services, facts.classes)
        count = changes.listed
        message = f"fetched the catalog (OSB {facts.spoken}): {count} service class(es)"
        if changes.conflicts:
            message += "; not offered (a class of that name belongs to another broker): " + ", ".join(changes.conflicts)
        conditions = ready_condition(
            held, ready=True, reason=Reason.FETCHED_CATALOG, message=message, generation=generation, at=facts.now
        )
        problems = (*facts.catalog.problems, *changes.problems)
        conditions, problem_event = completeness(conditions, problems, generation=generation, now=facts.now)
        new_status = RelistStatus(
            {**base, "lastCatalogRetrievalTime": relisting.now_text(facts.now), "brokerAPIVersion": facts.spoken},
            conditions_of(conditions),
            count,
        )
        said = (Reason.CLASS_NAME_CONFLICT, message, True) if changes.conflicts else problem_event
        actions: list[Any] = [WriteClasses(changes, partial(relisted, new_status, said, facts.now))]
        if spec.relist_behavior == "Duration":
            actions.append(come_back(parse_go_duration(spec.relist_duration).total_seconds()))
        return actions

    def reread(self, key: Key) -> None:
        """A guarded write met a conflict: the next observe reads the Broker from the API."""
        self.api.forget(BROKERS, "", key.name)

    def act(self, facts: BrokerFacts, actions: Sequence[Any]) -> Outcome:
        return self.executor.run(facts.key, facts.broker.wire, actions)

    def _write(self, run: Run, action: WriteClasses) -> None:
        """The class writes' effect: what the API server refused goes to the plan's continuation."""
        refused = self._write_classes(action.changes)
        if action.then is not None:
            for follow in action.then(refused, run.body):
                run.perform(follow)

    def _write_classes(self, changes: ClassChanges) -> list[osbclient.catalog.Problem]:
        """Write the classes; each one the API server refuses for good (400, 413, 422) is returned as a problem
        and the others are written all the same. Other failures (conflicts, an unavailable server) raise."""
        refused: list[osbclient.catalog.Problem] = []
        for body in changes.create:
            refused.extend(self._refusal(body, partial(self.api.create, CLASSES, body)))
        for body in changes.update:
            name = Meta.of(body.get("metadata")).name
            refused.extend(self._refusal(body, partial(self.api.patch, CLASSES, "", name, _replacement_patch(body))))
        for name in changes.removed:
            held = self.api.get(CLASSES, "", name)
            if held is not None:
                self.api.patch_status(CLASSES, held, {"removedFromBrokerCatalog": True}, guarded=False)
        for name in changes.restored:
            held = self.api.get(CLASSES, "", name)
            if held is not None:
                self.api.patch_status(CLASSES, held, {"removedFromBrokerCatalog": False}, guarded=False)
        return refused

    @staticmethod
    def _refusal(body: JsonBody, write: Callable[[], object]) -> list[osbclient.catalog.Problem]:
        try:
            write()
        except ApiException as exc:
            if refusals.severity(exc.status) is not refusals.Severity.PERMANENT:
                raise
            found = refusals.refusal(exc.status, exc.body, body)
            logger.warning("%s; the class is skipped", found.describe())
            service = text_of(body.get("externalName"))
            return [osbclient.catalog.Problem(service, None, "(object)", found.describe(), True)]
        return []


def completeness(
    conditions: list[JsonBody],
    problems: Sequence[osbclient.catalog.Problem],
    *,
    generation: int | None,
    now: datetime | None = None,
) -> tuple[list[JsonBody], tuple[Reason, str, bool] | None]:
    """``conditions`` with ``CatalogComplete`` set from ``problems``, and the warning event to record (None
    when there is nothing to say). Pure."""
    skipped = [p for p in problems if p.skipped]
    if skipped:
        reason, complete = Reason.CATALOG_ENTRIES_SKIPPED, False
        head = f"{len(skipped)} catalog entr(ies) skipped, the rest listed"
    elif problems:
        reason, complete = Reason.CATALOG_FIELDS_IGNORED, True
        head = f"every entry listed; {len(problems)} optional field(s) of the wrong type ignored"
    else:
        reason, complete = Reason.ALL_ENTRIES_LISTED, True
        head = "every service and plan of the catalog is listed"
    ordered = [*skipped, *(p for p in problems if not p.skipped)]
    named = "; ".join(p.describe() for p in ordered[:NAMED_PROBLEMS])
    more = f"; and {len(ordered) - NAMED_PROBLEMS} more" if len(ordered) > NAMED_PROBLEMS else ""
    message = f"{head}: {named}{more}" if ordered else head
    change = Condition(CATALOG_COMPLETE, complete, reason, message)
    listed = with_conditions(conditions_of(conditions), [change], generation, now)
    return listed, ((reason, message, True) if ordered else None)


def _complete(conditions: object) -> ConditionView | None:
    return next((c for c in conditions_of(conditions) if c.type == CATALOG_COMPLETE), None)


@dataclass(frozen=True)
class RelistStatus:
    """The Broker's status a relist plans, written after its classes (:func:`relisted`)."""

    fields: JsonObject
    """The status fields the refusals do not change (generation, relist requests, time, version)."""
    conditions: tuple[ConditionView, ...]
    count: int
    """``serviceClassCount``: the classes listed."""

    def wire(self) -> JsonBody:
        """The status patch written."""
        conditions = [condition_wire(c) for c in self.conditions]
        return {**self.fields, "conditions": conditions, "serviceClassCount": self.count}


def with_refusals(
    status: RelistStatus,
    refused: Sequence[osbclient.catalog.Problem],
    generation: int | None,
    event: tuple[Reason, str, bool] | None,
    now: datetime | None = None,
) -> tuple[RelistStatus, tuple[Reason, str, bool] | None]:
    """The planned status and event, with the classes the API server refused counted out and named;
    ``generation``: the Broker's as last written. Pure."""
    held = _complete(status.conditions)
    earlier = held.message or "" if held is not None and held.reason != Reason.ALL_ENTRIES_LISTED.value else ""
    named = "; ".join(p.describe() for p in refused[:NAMED_PROBLEMS])
    message = f"{len(refused)} class(es) refused by the API server and skipped: {named}" + (
        f"; before that: {earlier}" if earlier else ""
    )
    change = Condition(CATALOG_COMPLETE, False, Reason.CATALOG_ENTRIES_SKIPPED, message)
    conditions = conditions_of(with_conditions(status.conditions, [change], generation, now))
    new_status = replace(status, conditions=conditions, count=max(0, status.count - len(refused)))
    return new_status, (event if event and event[0] is Reason.CLASS_NAME_CONFLICT else None) or (
        Reason.CATALOG_ENTRIES_SKIPPED,
        message,
        True,
    )


def relisted(
    status: RelistStatus,
    event: tuple[Reason, str, bool] | None,
    now: datetime,
    refused: Sequence[osbclient.catalog.Problem],
    body: JsonObject,
) -> list[Any]:
    """The Broker's status after its classes were written: as planned, or with the refused ones counted out and
    named (:func:`with_refusals`); ``body``: the Broker as last written. Pure."""
    if refused:
        status, event = with_refusals(status, refused, BrokerView.of(body).meta.generation, event, now)
    said = None if event is None else a.Event(event[0].value, event[1], warning=event[2])
    return [a.WriteStatus(status.wire(), event=said)]


def _replacement_patch(body: JsonBody) -> JsonBody:
    """A merge patch making the class's top-level fields those of ``body`` (guarded by its version)."""
    patch = {k: v for k, v in body.items() if k not in ("status", "apiVersion", "kind", "metadata")}
    for key in ("tags", "requires", "externalMetadata"):
        patch.setdefault(key, None)
    version = Meta.of(body.get("metadata")).resource_version
    if version is None:
        raise ValueError("a class is written over only at the resourceVersion it was read at")
    patch["metadata"] = {"resourceVersion": version}
    return patch
