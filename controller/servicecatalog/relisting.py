"""A broker's catalog as ServiceClasses (pure): what to create, change and mark removed.

A service gone from the catalog is not deleted: its ServiceClass is marked ``removedFromBrokerCatalog`` so
existing instances keep working (they deprovision through it); no new instance may use it. A service that
comes back is unmarked. A class name taken by another broker's service is a conflict, reported, not taken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from opbroker.api.servicecatalog import (
    SERVICE_CATALOG_GROUP,
    SERVICE_CATALOG_VERSION,
    RelistBehavior,
    ServiceClass,
    parse_go_duration,
    service_class_name,
)
from opbroker.controller.servicecatalog.resources import BROKER_LABEL


@dataclass(frozen=True)
class ClassChanges:
    create: tuple[dict[str, Any], ...] = ()
    update: tuple[dict[str, Any], ...] = ()
    """Whole objects (with the held resourceVersion) to write over the held ones."""
    removed: tuple[str, ...] = ()
    """Class names to mark removed from the broker's catalog."""
    restored: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = field(default=())
    """Service names whose class name belongs to another broker."""


def desired_class(broker: Mapping[str, Any], service: Mapping[str, Any]) -> dict[str, Any]:
    """The ServiceClass for one catalog ``service`` of ``broker`` (top-level fields, as in the seed)."""
    meta = broker["metadata"]
    plans = [
        _compact(
            name=plan["name"],
            externalID=plan["id"],
            description=plan.get("description", ""),
            free=plan.get("free", True),
            bindable=plan.get("bindable"),
            externalMetadata=plan.get("metadata"),
            instanceCreateParameterSchema=_schema(plan, "service_instance", "create"),
            instanceUpdateParameterSchema=_schema(plan, "service_instance", "update"),
            bindingCreateParameterSchema=_schema(plan, "service_binding", "create"),
            maintenanceInfo=plan.get("maintenance_info"),
            maximumPollingDuration=_positive_int(plan.get("maximum_polling_duration")),
        )
        for plan in service.get("plans") or []
    ]
    return _compact(
        apiVersion=f"{SERVICE_CATALOG_GROUP}/{SERVICE_CATALOG_VERSION}",
        kind=ServiceClass.KIND,
        metadata={
            "name": service_class_name(service["name"]),
            "labels": {BROKER_LABEL: meta["name"]},
            "ownerReferences": [
                {
                    "apiVersion": broker["apiVersion"],
                    "kind": broker["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        brokerName=meta["name"],
        externalName=service["name"],
        externalID=service["id"],
        description=service.get("description", ""),
        bindable=bool(service.get("bindable", False)),
        planUpdatable=bool(service.get("plan_updateable", False)),
        tags=service.get("tags") or None,
        requires=service.get("requires") or None,
        externalMetadata=service.get("metadata"),
        plans=plans,
    )


def class_changes(
    broker: Mapping[str, Any], catalog: Mapping[str, Any], held: Sequence[Mapping[str, Any]]
) -> ClassChanges:
    """Compare the catalog with the classes held (every class of that name, whichever broker made it)."""
    name = broker["metadata"]["name"]
    by_name = {c["metadata"]["name"]: c for c in held}
    create, update, restored, conflicts = [], [], [], []
    wanted = set()
    for service in catalog.get("services") or []:
        want = desired_class(broker, service)
        class_name = want["metadata"]["name"]
        current = by_name.get(class_name)
        if current is not None and current.get("brokerName") != name:
            conflicts.append(service["name"])
            continue
        wanted.add(class_name)
        if current is None:
            create.append(want)
            continue
        if (current.get("status") or {}).get("removedFromBrokerCatalog"):
            restored.append(class_name)
        if _content(current) != _content(want):
            replacement = {**current, **{k: v for k, v in want.items() if k != "metadata"}}
            for key in set(current) - set(want) - {"metadata", "status", "apiVersion", "kind"}:
                replacement.pop(key)
            update.append(replacement)
    removed = tuple(
        sorted(
            n
            for n, c in by_name.items()
            if c.get("brokerName") == name
            and n not in wanted
            and not (c.get("status") or {}).get("removedFromBrokerCatalog")
        )
    )
    return ClassChanges(tuple(create), tuple(update), removed, tuple(restored), tuple(conflicts))


def relist_due(broker: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds until the next relist is due (≤ 0: now), or None when only a request would cause one."""
    spec, status = broker.get("spec") or {}, broker.get("status") or {}
    meta = broker.get("metadata") or {}
    if status.get("observedGeneration") != meta.get("generation"):
        return 0.0  # new or changed spec
    if int(spec.get("relistRequests") or 0) > int(status.get("reconciledRelistRequests") or 0):
        return 0.0
    last = status.get("lastCatalogRetrievalTime")
    if not last or not _ready(status):
        return 0.0
    if spec.get("relistBehavior", RelistBehavior.DURATION.value) == RelistBehavior.MANUAL.value:
        return None
    interval = parse_go_duration(spec.get("relistDuration") or "15m").total_seconds()
    since = (now - datetime.fromisoformat(last.replace("Z", "+00:00"))).total_seconds()
    return interval - since


def now_text(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _content(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _schema(plan: Mapping[str, Any], kind: str, action: str) -> Any:
    schemas = plan.get("schemas") or {}
    return (((schemas.get(kind) or {}).get(action) or {}).get("parameters")) or None


def _positive_int(value: Any) -> int | None:
    """An OSB integer that must be positive, or None when absent or unusable (a broker's mistake in an
    optional field must not stop its whole catalog from being listed)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _compact(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}
