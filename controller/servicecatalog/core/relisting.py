"""A broker's catalog as ServiceClasses (pure): what to create, change and mark removed.

A service gone from the catalog is not deleted: its ServiceClass is marked ``removedFromBrokerCatalog`` so
existing instances keep working (they deprovision through it); no new instance may use it. A service that
comes back is unmarked. A class name taken by another broker's service is a conflict, reported, not taken.

The catalog arrives read entry by entry (``osbclient.catalog``); each plan and each class is then checked
against the ServiceClass model — the same model the CRD is generated from, so what passes here the API server
accepts — and one that cannot be represented (a plan name with a space, which an Instance could not name) is
skipped and reported as a :class:`osbclient.catalog.Problem`, never written to be refused.

Which OSB version to speak (:func:`version_to_speak`): the one the Broker's status records as accepted, so a
periodic relist costs no 412s; spec.brokerAPIVersion again (a probe upward) when the spec changed or a relist was
requested (``relistRequests``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from opbroker import osbclient
from opbroker.api.servicecatalog import (
    SERVICE_CATALOG_GROUP,
    SERVICE_CATALOG_VERSION,
    RelistBehavior,
    ServiceClass,
    ServicePlan,
    parse_go_duration,
    service_class_name,
)
from opbroker.controller.servicecatalog.core.views import BrokerView, ServiceClassView
from opbroker.kubeclient.wire import JsonBody, JsonObject

#: The label naming the Broker a class was listed from (the Service Catalog's own).
BROKER_LABEL = "servicecatalog.k8s.io/broker"

Problem = osbclient.catalog.Problem


@dataclass(frozen=True)
class ClassChanges:
    create: tuple[JsonBody, ...] = ()
    update: tuple[JsonBody, ...] = ()
    """Whole objects (with the held resourceVersion) to write over the held ones."""
    removed: tuple[str, ...] = ()
    """Class names to mark removed from the broker's catalog."""
    restored: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = field(default=())
    """Service names whose class name belongs to another broker."""
    problems: tuple[Problem, ...] = ()
    """Plans and services left out because a ServiceClass cannot represent them."""
    listed: int = 0
    """How many classes the catalog offers (written or kept)."""


def desired_plan(plan: osbclient.catalog.Plan) -> JsonBody:
    """One plan of a ServiceClass (wire form), from a plan read from the catalog."""
    return _compact(
        name=plan.name,
        externalID=plan.id,
        description=plan.description,
        free=True if plan.free is None else plan.free,
        bindable=plan.bindable,
        externalMetadata=_plain(plan.metadata),
        instanceCreateParameterSchema=_plain(plan.instance_create_schema),
        instanceUpdateParameterSchema=_plain(plan.instance_update_schema),
        bindingCreateParameterSchema=_plain(plan.binding_create_schema),
        maintenanceInfo=_compact(version=plan.maintenance_info.version, description=plan.maintenance_info.description)
        if plan.maintenance_info
        else None,
        maximumPollingDuration=plan.maximum_polling_duration,
    )


def desired_class(
    broker: BrokerView, service: osbclient.catalog.Service
) -> tuple[JsonBody | None, tuple[Problem, ...]]:
    """The ServiceClass for one catalog ``service`` of ``broker`` (top-level fields, as in the seed), with only
    the plans the model accepts; None when the class itself cannot be represented (or no plan can). Each plan
    or class left out is a skipping problem naming the field. (A manifest written, so a plain dict.)"""
    problems: list[Problem] = []
    plans = []
    for plan in service.plans:
        body = desired_plan(plan)
        refused = _refusal(ServicePlan, body)
        if refused is not None:
            problems.append(Problem(service.name, plan.name, *refused, True))
            continue
        plans.append(body)
    if not plans:
        return None, (*problems, Problem(service.name, None, "plans", "has no plan a ServiceClass can hold", True))
    body = _compact(
        apiVersion=f"{SERVICE_CATALOG_GROUP}/{SERVICE_CATALOG_VERSION}",
        kind=ServiceClass.KIND,
        metadata={
            "name": service_class_name(service.name),
            "labels": {BROKER_LABEL: broker.meta.name},
            "ownerReferences": [broker.owner_reference],
        },
        brokerName=broker.meta.name,
        externalName=service.name,
        externalID=service.id,
        description=service.description,
        bindable=service.bindable,
        planUpdatable=service.plan_updateable,
        instancesRetrievable=service.instances_retrievable or None,  # absent when false: no churn on relist
        tags=list(service.tags) or None,
        requires=list(service.requires) or None,
        externalMetadata=_plain(service.metadata),
        plans=plans,
    )
    refused = _refusal(ServiceClass, body)
    if refused is not None:
        return None, (*problems, Problem(service.name, None, *refused, True))
    return body, tuple(problems)


def _refusal(model: type[ServicePlan] | type[ServiceClass], body: JsonObject) -> tuple[str, str] | None:
    """``(field, why)`` of the first error the model finds in ``body``, None when it accepts it."""
    try:
        model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "(object)"
        return field, f"cannot be represented: {error['msg']}"
    return None


def class_changes(
    broker: BrokerView, services: Sequence[osbclient.catalog.Service], held: Sequence[ServiceClassView]
) -> ClassChanges:
    """Compare the catalog's services with the classes held (every class of that name, whichever broker made it)."""
    name = broker.meta.name
    by_name = {c.meta.name: c for c in held}
    create: list[JsonBody] = []
    update: list[JsonBody] = []
    restored: list[str] = []
    conflicts: list[str] = []
    problems: list[Problem] = []
    wanted = set()
    for service in services:
        want, skipped = desired_class(broker, service)
        problems.extend(skipped)
        if want is None:
            continue
        class_name = service_class_name(service.name)
        if class_name in wanted:
            problems.append(Problem(service.name, None, "name", f"makes the class name {class_name!r} again", True))
            continue
        current = by_name.get(class_name)
        if current is not None and current.broker_name != name:
            conflicts.append(service.name)
            continue
        wanted.add(class_name)
        if current is None:
            create.append(want)
            continue
        if current.removed:
            restored.append(class_name)
        content = _content(want)
        if current.content != content:
            update.append(_replacement(current, content))
    removed = tuple(
        sorted(n for n, c in by_name.items() if c.broker_name == name and n not in wanted and not c.removed)
    )
    return ClassChanges(
        tuple(create), tuple(update), removed, tuple(restored), tuple(conflicts), tuple(problems), len(wanted)
    )


def _replacement(current: ServiceClassView, content: JsonObject) -> JsonBody:
    """The held class (its metadata with the resourceVersion, status, apiVersion, kind) with ``content`` as its
    top-level fields: what is written over it."""
    held = dict(current.wire)
    for key in current.content:
        if key not in content:
            held.pop(key)
    return {**held, **content}


def version_to_speak(broker: BrokerView) -> str:
    """The OSB version a catalog fetch starts from: the status's accepted one, unless the spec changed or a
    relist was requested (then spec.brokerAPIVersion again, which may be a newer one the broker learnt since)."""
    wanted = broker.spec.api_version or osbclient.API_VERSION
    if wanted not in osbclient.versions.SUPPORTED:
        wanted = osbclient.API_VERSION
    held = broker.accepted_api_version
    if held not in osbclient.versions.SUPPORTED or _probe_due(broker):
        return wanted
    assert held is not None
    order = osbclient.versions.SUPPORTED.index
    return held if order(held) >= order(wanted) else wanted  # never above the spec's


def _probe_due(broker: BrokerView) -> bool:
    """The spec changed since the last fetch, or a relist was requested since."""
    return (
        broker.observed_generation != broker.meta.generation
        or broker.spec.relist_requests > broker.reconciled_relist_requests
    )


def relist_due(broker: BrokerView, now: datetime) -> float | None:
    """Seconds until the next relist is due (≤ 0: now), or None when only a request would cause one."""
    if _probe_due(broker):
        return 0.0  # new or changed spec, or a relist requested
    last = broker.last_catalog_retrieval
    if not last or not broker.ready:
        return 0.0
    if broker.spec.relist_behavior == RelistBehavior.MANUAL.value:
        return None
    interval = parse_go_duration(broker.spec.relist_duration).total_seconds()
    since = (now - datetime.fromisoformat(last.replace("Z", "+00:00"))).total_seconds()
    return interval - since


def now_text(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _content(obj: JsonObject) -> JsonBody:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _plain(value: JsonObject | None) -> JsonBody | None:
    return dict(value) if value is not None else None


def _compact(**values: object) -> JsonBody:
    return {k: v for k, v in values.items() if v is not None}
