"""Deciding service-instance requests: provision, update, deprovision, fetch.

Each function takes the validated request, the catalog and the stored instance (or ``None``) and returns
a :mod:`decisions` value, or raises :class:`errors.BrokerError`. Checks run cheapest-and-most-basic
first (400 malformed or naming an unknown instance → 404/410 missing → 422 not possible now → 409
conflicting), and every refusal
happens before anything is written, so a 4xx never changes state.

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opbroker.api.catalog import SFPlanSpec
from opbroker.broker import bodies, errors, parameters, records
from opbroker.broker.catalogs import Catalog
from opbroker.broker.decisions import (
    FAILED,
    SUCCEEDED,
    Answer,
    Change,
    Create,
    Decision,
    Remove,
    Wait,
    accepted,
    differing,
    failure,
    is_pending,
    is_removing,
    last_type,
)
from opbroker.broker.namespaces import context_namespace
from opbroker.broker.operations import OperationType, Token
from opbroker.broker.records import Record

#: What makes two provision requests "identical" (the namespace is part of ``context``).
PROVISION_KEYS = ("serviceId", "planId", "organizationGuid", "spaceGuid", "context", "parameters", "maintenance_info")
#: What an update can change.
UPDATE_KEYS = ("planId", "parameters", "context", "maintenance_info")


def _async_required(what: str) -> errors.BrokerError:
    return errors.BrokerError(
        errors.Reason.ASYNC_REQUIRED,
        f"this service plan {what} asynchronously; repeat the request with accepts_incomplete=true",
    )


def _concurrency(description: str) -> errors.BrokerError:
    return errors.BrokerError(errors.Reason.CONCURRENCY_ERROR, description)


def namespace_for(context: Mapping[str, Any] | None, *, default: str, from_context: bool) -> str:
    """Where a new instance is recorded: the Kubernetes profile's ``context.namespace``, else ``default``.
    (Whether the platform allows that namespace is :func:`opbroker.broker.namespaces.admit`'s to say.)"""
    namespace = context_namespace(context)
    if not from_context or namespace is None:
        return default
    return namespace


def check_maintenance_info(info: bodies.MaintenanceInfo | None, plan: SFPlanSpec) -> None:
    """422 MaintenanceInfoConflict unless a given ``maintenance_info.version`` is the plan's current one."""
    if info is None:
        return
    current = plan.maintenance_info
    if current is None:
        raise errors.BrokerError(
            errors.Reason.MAINTENANCE_INFO_CONFLICT,
            f"plan {plan.id!r} has no maintenance_info; fetch the catalog and omit maintenance_info",
        )
    if info.version != current.version:
        raise errors.BrokerError(
            errors.Reason.MAINTENANCE_INFO_CONFLICT,
            f"maintenance_info.version {info.version!r} does not match the plan's {current.version!r}; "
            "fetch the catalog",
        )


def provision(
    request: bodies.ProvisionRequest,
    *,
    instance_id: str,
    catalog: Catalog,
    existing: Record | None,
    accepts_incomplete: bool,
) -> Decision:
    offering = catalog.resolve(request.service_id, request.plan_id)
    if offering.asynchronous and not accepts_incomplete:
        raise _async_required("provisions")
    check_maintenance_info(request.maintenance_info, offering.plan)
    parameters.validate(offering.schema("create"), request.parameters, action="create")
    if existing is None:
        catalog.check_offered(request.plan_id)
        return Create(asynchronous=offering.asynchronous)

    if is_removing(existing):
        raise _concurrency(f"instance {instance_id!r} is being deprovisioned; wait until it is gone")
    different = differing(existing.spec, records.instance_spec(instance_id, request), PROVISION_KEYS)
    if different:
        raise errors.BrokerError(
            errors.Reason.CONFLICT,
            f"instance {instance_id!r} already exists with different attributes: {', '.join(different)}",
        )
    token = Token.of(OperationType.PROVISION, existing)
    body = bodies.ProvisionBody(dashboard_url=existing.dashboard_url)
    if last_type(existing) is not OperationType.PROVISION or existing.state == SUCCEEDED:
        return Answer(200, body.wire())
    if existing.state == FAILED and not offering.asynchronous:
        raise failure(existing, OperationType.PROVISION)
    return accepted(token, body) if offering.asynchronous else Wait(token)


def _merged(current: Mapping[str, Any] | None, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Update parameters: the given keys replace the stored ones (``null`` removes one); others stay."""
    merged = {**(current or {}), **changes}
    return {key: value for key, value in merged.items() if value is not None}


def updated_spec(
    current: Mapping[str, Any], request: bodies.UpdateRequest, plan_id: str, *, allow_context_updates: bool
) -> dict[str, Any]:
    """The instance spec an update asks for. A context-only change counts only if the service allows it."""
    spec = dict(current)
    spec["planId"] = plan_id
    if request.parameters is not None:
        spec["parameters"] = _merged(current.get("parameters"), request.parameters)
    if request.maintenance_info is not None:
        spec["maintenance_info"] = records.maintenance_info(request.maintenance_info)
    other_changes = bool(differing(current, spec, UPDATE_KEYS))
    if request.context is not None and (allow_context_updates or other_changes):
        spec["context"] = request.context
    return spec


def previous_values(current: Mapping[str, Any]) -> dict[str, Any]:
    """What the instance was before an update, as the OSB ``previous_values`` object (for the controller)."""
    values = {"service_id": current.get("serviceId"), "plan_id": current.get("planId")}
    if current.get("maintenance_info"):
        values["maintenance_info"] = current["maintenance_info"]
    if current.get("parameters"):
        values["parameters"] = current["parameters"]
    return values


def update(
    request: bodies.UpdateRequest,
    *,
    instance_id: str,
    catalog: Catalog,
    existing: Record | None,
    accepts_incomplete: bool,
) -> Decision:
    service = catalog.service(request.service_id)
    if service is None:
        raise errors.bad_request(f"service_id {request.service_id!r} is not in this broker's catalog")
    if request.plan_id is not None:
        catalog.resolve(request.service_id, request.plan_id)
    if existing is None:
        raise errors.BrokerError(errors.Reason.INSTANCE_DOES_NOT_EXIST, f"instance {instance_id!r} does not exist")
    if existing.spec.get("serviceId") != request.service_id:
        raise errors.bad_request(f"instance {instance_id!r} is not an instance of service_id {request.service_id!r}")
    current_plan = str(existing.spec.get("planId"))
    target_plan = request.plan_id or current_plan
    offering = catalog.offering(request.service_id, target_plan)
    if offering is None:
        raise errors.bad_request(f"the instance's plan {current_plan!r} is no longer in the catalog; name a plan_id")
    if is_removing(existing):
        raise _concurrency(f"instance {instance_id!r} is being deprovisioned")
    if last_type(existing) is OperationType.PROVISION and existing.state != SUCCEEDED:
        if is_pending(existing):
            raise _concurrency(f"instance {instance_id!r} is still being provisioned")
        raise errors.BrokerError(
            errors.Reason.INSTANCE_NOT_USABLE, f"provisioning instance {instance_id!r} failed; deprovision it"
        )
    if target_plan != current_plan:
        catalog.check_offered(target_plan)
        current = catalog.offering(request.service_id, current_plan)
        if not (current.plan_updatable if current is not None else service.plan_updatable):
            raise errors.BrokerError(
                errors.Reason.PLAN_CHANGE_NOT_SUPPORTED,
                f"plan {current_plan!r} cannot be changed (plan_updateable is false)",
            )
    check_maintenance_info(request.maintenance_info, offering.plan)
    if request.parameters is not None:
        parameters.validate(offering.schema("update"), request.parameters, action="update")

    target = updated_spec(existing.spec, request, target_plan, allow_context_updates=service.allow_context_updates)
    changed = bool(differing(existing.spec, target, UPDATE_KEYS))
    token = Token.of(OperationType.UPDATE, existing)
    body = bodies.ProvisionBody(dashboard_url=existing.dashboard_url)
    if is_pending(existing):
        if changed:
            raise _concurrency(f"instance {instance_id!r} has an update in progress")
        if offering.asynchronous and not accepts_incomplete:
            raise _async_required("updates")
        return accepted(token, body) if offering.asynchronous else Wait(token)
    retry = existing.state == FAILED and last_type(existing) is OperationType.UPDATE
    if not changed and not retry:
        return Answer(200, {})
    if offering.asynchronous and not accepts_incomplete:
        raise _async_required("updates")
    if changed:
        target["previousValues"] = previous_values(existing.spec)
    return Change(spec=records.validated_instance_spec(target), asynchronous=offering.asynchronous)


def binding_census(bindings: Iterable[Record]) -> tuple[int, list[Record]]:
    """What the instance's bindings mean for a deprovision: how many block it, and which are still being
    created (their bind not recorded yet, see :mod:`opbroker.broker.effects`): wait for those to be
    recorded or withdrawn, then count again; any still unsettled after that wait block it too.

    A binding withdrawn before it was recorded (deleting, no ``lastOperation``) blocks nothing: its bind was
    refused, or it is being unbound; the deprovision waits for it to go before its DELETE.
    """
    blocking, unsettled = 0, []
    for binding in bindings:
        if binding.operation_type is not None:
            blocking += 1
        elif not binding.deleting:
            unsettled.append(binding)
    return blocking, unsettled


def deprovision(
    *,
    instance_id: str,
    service_id: str | None,
    plan_id: str | None,
    catalog: Catalog,
    existing: Record | None,
    live_bindings: int,
    accepts_incomplete: bool,
) -> Decision:
    """DELETE: works on half-created instances and during provisioning (orphan mitigation)."""
    service_id = errors.require_query("service_id", service_id)
    plan_id = errors.require_query("plan_id", plan_id)
    if existing is None:
        raise errors.BrokerError(errors.Reason.GONE, f"instance {instance_id!r} does not exist")
    if existing.spec.get("serviceId") != service_id:
        raise errors.bad_request(f"instance {instance_id!r} is not an instance of service_id {service_id!r}")
    offering = catalog.offering(service_id, str(existing.spec.get("planId"))) or catalog.offering(service_id, plan_id)
    asynchronous = offering.asynchronous if offering is not None else True
    if asynchronous and not accepts_incomplete:
        raise _async_required("deprovisions")
    if existing.deleting:
        token = Token.of(OperationType.DEPROVISION, existing)
        return accepted(token) if asynchronous else Wait(token)
    if live_bindings:
        raise errors.BrokerError(
            errors.Reason.BINDINGS_EXIST,
            f"instance {instance_id!r} still has {live_bindings} binding(s); unbind them first",
        )
    return Remove(asynchronous=asynchronous)


def fetch(*, instance_id: str, catalog: Catalog, existing: Record | None) -> Answer:
    """GET: 404 while provisioning (or after it failed), 422 ConcurrencyError while changing."""
    if existing is None:
        raise errors.BrokerError(errors.Reason.NOT_FOUND, f"instance {instance_id!r} does not exist")
    service = catalog.service(str(existing.spec.get("serviceId")))
    if service is not None and not service.instances_retrievable:
        raise errors.bad_request(f"instances of service {service.name!r} are not retrievable")
    if is_removing(existing):
        raise _concurrency(f"instance {instance_id!r} is being deprovisioned")
    if last_type(existing) is OperationType.PROVISION and existing.state != SUCCEEDED:
        raise errors.BrokerError(errors.Reason.NOT_FOUND, f"instance {instance_id!r} is not provisioned (yet)")
    if is_pending(existing):
        raise _concurrency(f"instance {instance_id!r} is being updated")
    info = existing.spec.get("maintenance_info") or None
    body = bodies.InstanceBody(
        service_id=existing.spec.get("serviceId"),
        plan_id=existing.spec.get("planId"),
        dashboard_url=existing.dashboard_url,
        parameters=existing.spec.get("parameters"),
        maintenance_info=bodies.MaintenanceInfoBody(version=info["version"]) if info else None,
        metadata=bodies.InstanceMetadataBody(attributes=health) if (health := existing.health) else None,
    )
    return Answer(200, body.wire())
