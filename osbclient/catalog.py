"""A broker's catalog as typed values, read the tolerant way (:mod:`.tolerance`), entry by entry.

One odd entry never hides the rest: a service or plan whose required fields (``id``, ``name``, ``plans``) are
missing, empty or of the wrong type, or that repeats an id or name already listed, is **skipped** and reported
as a :class:`Problem` naming the service, the plan and the field; an optional field of the wrong type is
**dropped** and reported the same way (``skipped=False``); the rest of the catalog is read as sent. Fields the
version spoken does not define (``maintenance_info`` and ``maximum_polling_duration`` before 2.15) are unknown to
it and ignored without a word, as every unknown field is.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from opbroker.osbclient import tolerance, versions
from opbroker.osbclient.tolerance import Warnings

#: OSB: a maintenance_info version is a semantic version (2.0.0).
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$",
)
#: More services or plans than this in one answer are not read (each becomes an object in the cluster).
MAX_SERVICES = 1000
MAX_PLANS = 200


@dataclass(frozen=True)
class Problem:
    """Something of the catalog that was skipped (``skipped``) or dropped (an optional field)."""

    service: str | None
    """The service's name (its id when it has no usable name), None for the catalog as a whole."""
    plan: str | None
    field: str
    message: str
    skipped: bool

    def describe(self) -> str:
        where = " ".join(
            part
            for part in (
                f"service {self.service!r}" if self.service else "",
                f"plan {self.plan!r}" if self.plan else "",
            )
            if part
        )
        text = f"{where or 'catalog'}: {self.field} {self.message}".replace(":  ", ": ")
        return f"{text}: {'plan' if self.plan else 'service'} skipped" if self.skipped else text


@dataclass(frozen=True)
class MaintenanceInfo:
    version: str
    description: str | None = None


@dataclass(frozen=True)
class Plan:
    id: str
    name: str
    description: str = ""
    free: bool | None = None
    bindable: bool | None = None
    metadata: Mapping[str, Any] | None = None
    instance_create_schema: Mapping[str, Any] | None = None
    instance_update_schema: Mapping[str, Any] | None = None
    binding_create_schema: Mapping[str, Any] | None = None
    maintenance_info: MaintenanceInfo | None = None
    maximum_polling_duration: int | None = None


@dataclass(frozen=True)
class Service:
    id: str
    name: str
    plans: tuple[Plan, ...]
    description: str = ""
    bindable: bool = False
    plan_updateable: bool = False
    instances_retrievable: bool = False
    bindings_retrievable: bool = False
    tags: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Catalog:
    services: tuple[Service, ...]
    problems: tuple[Problem, ...] = ()

    @property
    def skipped(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.skipped)


class NotACatalog(ValueError):
    """The answer has no ``services`` array at all: there is nothing to read entry by entry."""


def read(payload: Mapping[str, Any], version: str = versions.LATEST) -> Catalog:
    """The catalog in ``payload`` (a ``GET /v2/catalog`` answer) as ``version`` defines it."""
    services = payload.get("services")
    if not isinstance(services, list):
        raise NotACatalog(f"the catalog has no services array (services is {tolerance.type_name(services)})")
    problems: list[Problem] = []
    if len(services) > MAX_SERVICES:
        read_only = f"holds {len(services)} services: only the first {MAX_SERVICES} are read"
        problems.append(Problem(None, None, "services", read_only, True))
    read_services: list[Service] = []
    ids: set[str] = set()
    names: set[str] = set()
    for index, raw in enumerate(services[:MAX_SERVICES]):
        service = _service(raw, index, version, problems)
        if service is None:
            continue
        if service.id in ids or service.name in names:
            field = "id" if service.id in ids else "name"
            problems.append(Problem(service.name, None, field, "repeats an earlier service's", True))
            continue
        ids.add(service.id)
        names.add(service.name)
        read_services.append(service)
    return Catalog(tuple(read_services), tuple(problems))


def _label(raw: Mapping[str, Any], index: int, what: str) -> str:
    """How to name an entry in a problem: its name, else its id, else its position."""
    for key in ("name", "id"):
        value = raw.get(key)
        if isinstance(value, str) and value:
            return value
    return f"{what} #{index + 1}"


def _required(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    return value if isinstance(value, str) and value else None


def _service(raw: Any, index: int, version: str, problems: list[Problem]) -> Service | None:
    if not isinstance(raw, dict):
        what = f"is {tolerance.type_name(raw)}, not an object"
        problems.append(Problem(f"service #{index + 1}", None, "", what, True))
        return None
    label = _label(raw, index, "service")
    for key in ("id", "name"):
        if _required(raw, key) is None:
            problems.append(Problem(label, None, key, "is missing, empty or not a string (required)", True))
            return None
    raw_plans = raw.get("plans")
    if not isinstance(raw_plans, list) or not raw_plans:
        problems.append(Problem(label, None, "plans", "is missing, empty or not an array (required)", True))
        return None
    warnings = Warnings()
    plans: list[Plan] = []
    ids: set[str] = set()
    names: set[str] = set()
    for plan_index, raw_plan in enumerate(raw_plans[:MAX_PLANS]):
        plan = _plan(label, raw_plan, plan_index, version, problems)
        if plan is None:
            continue
        if plan.id in ids or plan.name in names:
            field = "id" if plan.id in ids else "name"
            problems.append(Problem(label, plan.name, field, "repeats an earlier plan's", True))
            continue
        ids.add(plan.id)
        names.add(plan.name)
        plans.append(plan)
    if len(raw_plans) > MAX_PLANS:
        read_only = f"holds {len(raw_plans)} plans: only the first {MAX_PLANS} are read"
        problems.append(Problem(label, None, "plans", read_only, True))
    if not plans:
        problems.append(Problem(label, None, "plans", "has no usable plan left", True))
        return None
    description = tolerance.optional_str(raw, "description", warnings)
    bindable = tolerance.optional_bool(raw, "bindable", warnings)
    service = Service(
        id=raw["id"],
        name=raw["name"],
        plans=tuple(plans),
        description=description or "",
        bindable=bool(bindable),
        plan_updateable=bool(tolerance.optional_bool(raw, "plan_updateable", warnings)),
        instances_retrievable=bool(tolerance.optional_bool(raw, "instances_retrievable", warnings)),
        bindings_retrievable=bool(tolerance.optional_bool(raw, "bindings_retrievable", warnings)),
        tags=tuple(tolerance.optional_strings(raw, "tags", warnings) or ()),
        requires=tuple(tolerance.optional_strings(raw, "requires", warnings) or ()),
        metadata=_frozen(tolerance.optional_dict(raw, "metadata", warnings)),
    )
    problems.extend(_dropped(label, None, warnings))
    return service


def _plan(service: str, raw: Any, index: int, version: str, problems: list[Problem]) -> Plan | None:
    if not isinstance(raw, dict):
        what = f"is {tolerance.type_name(raw)}, not an object"
        problems.append(Problem(service, f"plan #{index + 1}", "", what, True))
        return None
    label = _label(raw, index, "plan")
    for key in ("id", "name"):
        if _required(raw, key) is None:
            problems.append(Problem(service, label, key, "is missing, empty or not a string (required)", True))
            return None
    warnings = Warnings()
    schemas = tolerance.optional_dict(raw, "schemas", warnings) or {}
    instance = tolerance.optional_dict(schemas, "service_instance", warnings, "schemas") or {}
    binding = tolerance.optional_dict(schemas, "service_binding", warnings, "schemas") or {}
    maintenance = None
    polling = None
    if versions.defines(version, versions.Feature.MAINTENANCE_INFO):
        maintenance = _maintenance_info(raw, warnings)
    if versions.defines(version, versions.Feature.MAXIMUM_POLLING_DURATION):
        polling = tolerance.optional_int(raw, "maximum_polling_duration", warnings)
        if polling is not None and polling < 1:
            warnings.add("maximum_polling_duration", f"is {polling}, not a positive number of seconds: ignored")
            polling = None
    plan = Plan(
        id=raw["id"],
        name=raw["name"],
        description=tolerance.optional_str(raw, "description", warnings) or "",
        free=tolerance.optional_bool(raw, "free", warnings),
        bindable=tolerance.optional_bool(raw, "bindable", warnings),
        metadata=_frozen(tolerance.optional_dict(raw, "metadata", warnings)),
        instance_create_schema=_schema(instance, "create", warnings, "schemas.service_instance"),
        instance_update_schema=_schema(instance, "update", warnings, "schemas.service_instance"),
        binding_create_schema=_schema(binding, "create", warnings, "schemas.service_binding"),
        maintenance_info=maintenance,
        maximum_polling_duration=polling,
    )
    problems.extend(_dropped(service, label, warnings))
    return plan


def _schema(holder: Mapping[str, Any], action: str, warnings: Warnings, where: str) -> Mapping[str, Any] | None:
    found = tolerance.optional_dict(holder, action, warnings, where) or {}
    return _frozen(tolerance.optional_dict(found, "parameters", warnings, f"{where}.{action}"))


def _maintenance_info(raw: Mapping[str, Any], warnings: Warnings) -> MaintenanceInfo | None:
    info = tolerance.optional_dict(raw, "maintenance_info", warnings)
    if info is None:
        return None
    version = tolerance.absent_if_blank(info.get("version"))
    if not isinstance(version, str) or not _SEMVER.match(version):
        shown = tolerance.quoted(version) if version is not None else "missing"
        warnings.add("maintenance_info.version", f"is {shown}, not a semantic version: maintenance_info ignored")
        return None
    description = tolerance.optional_str(info, "description", warnings, "maintenance_info")
    return MaintenanceInfo(version, description)


def _dropped(service: str, plan: str | None, warnings: Warnings) -> list[Problem]:
    """Each dropped optional field as a problem of the entry it belongs to."""
    return [Problem(service, plan, d.field, d.message, False) for d in warnings.frozen()]


def _frozen(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return MappingProxyType(dict(value)) if value is not None else None
