"""Deciding service-binding requests: bind, unbind, fetch.

Same shape as :mod:`opbroker.broker.instances`: validated request + catalog + stored objects in, a
:mod:`decisions` value out (or :class:`errors.BrokerError`), nothing written before every check passed.

Pure.
"""

from __future__ import annotations

from opbroker.broker import bodies, errors, parameters, records
from opbroker.broker.catalogs import Catalog
from opbroker.broker.decisions import (
    FAILED,
    SUCCEEDED,
    Create,
    Credentials,
    Decision,
    Recheck,
    Remove,
    Wait,
    accepted,
    differing,
    failure,
    is_pending,
    is_removing,
    last_type,
)
from opbroker.broker.operations import OperationType, Token
from opbroker.broker.records import Record

#: What makes two bind requests "identical" (``acceptsIncomplete`` is how, not what).
BIND_KEYS = ("serviceId", "planId", "bindResource", "context", "parameters")


def bind(
    request: bodies.BindRequest,
    *,
    binding_id: str,
    instance_id: str,
    catalog: Catalog,
    instance: Record | None,
    existing: Record | None,
    accepts_incomplete: bool,
) -> Decision:
    offering = catalog.resolve(request.service_id, request.plan_id)
    if not offering.bindable:
        raise errors.bad_request(f"plan {request.plan_id!r} is not bindable")
    if instance is None:
        raise errors.BrokerError(errors.Reason.INSTANCE_DOES_NOT_EXIST, f"instance {instance_id!r} does not exist")
    if instance.spec.get("serviceId") != request.service_id or instance.spec.get("planId") != request.plan_id:
        raise errors.bad_request(
            f"service_id/plan_id do not match instance {instance_id!r} (plan {instance.spec.get('planId')!r})"
        )
    app_guid = request.app_guid or (request.bind_resource or {}).get("app_guid")
    if offering.requires_app and not app_guid:
        raise errors.BrokerError(
            errors.Reason.REQUIRES_APP, "this service binds to applications only: send bind_resource.app_guid"
        )
    if offering.asynchronous_binding and not accepts_incomplete:
        raise errors.BrokerError(
            errors.Reason.ASYNC_REQUIRED,
            "this service plan binds asynchronously; repeat the request with accepts_incomplete=true",
        )
    parameters.validate(offering.schema("bind"), request.parameters, action="bind")
    desired = records.binding_spec(binding_id, instance_id, request, accepts_incomplete)

    if existing is not None:
        if existing.spec.get("instanceId") != instance_id:
            raise errors.BrokerError(
                errors.Reason.CONFLICT, f"binding {binding_id!r} already exists for another instance"
            )
        if is_removing(existing):
            raise errors.BrokerError(
                errors.Reason.CONCURRENCY_ERROR, f"binding {binding_id!r} is being unbound; wait until it is gone"
            )
        if existing.operation_type is None:
            # Created by another request that has not recorded its bind yet and may still withdraw it
            # (see opbroker.broker.effects): not accepted yet, so not to be reported accepted either.
            return Recheck()
        different = differing(existing.spec, desired, BIND_KEYS)
        if different:
            raise errors.BrokerError(
                errors.Reason.CONFLICT,
                f"binding {binding_id!r} already exists with different attributes: {', '.join(different)}",
            )
        token = Token.of(OperationType.BIND, existing)
        if existing.state == SUCCEEDED:
            return Credentials(200)
        if existing.state == FAILED and not offering.asynchronous_binding:
            raise failure(existing, OperationType.BIND)
        return accepted(token) if offering.asynchronous_binding else Wait(token)

    check_bindable(instance_id, instance)
    return Create(asynchronous=offering.asynchronous_binding)


def check_bindable(instance_id: str, instance: Record) -> None:
    """A new binding needs an instance that is usable and not busy (422 ConcurrencyError while an operation,
    a deprovision above all, is under way)."""
    if is_removing(instance):
        raise errors.BrokerError(errors.Reason.CONCURRENCY_ERROR, f"instance {instance_id!r} is being deprovisioned")
    if is_pending(instance):
        raise errors.BrokerError(
            errors.Reason.CONCURRENCY_ERROR, f"instance {instance_id!r} has an operation in progress"
        )
    if instance.state == FAILED and (
        last_type(instance) is OperationType.PROVISION or instance.instance_usable is False
    ):
        raise errors.BrokerError(errors.Reason.INSTANCE_NOT_USABLE, f"instance {instance_id!r} is not usable")


def still_bindable(instance_id: str, bound_to: Record, now: Record | None) -> None:
    """After the binding was created: the instance read again (``now``) must still be the one the binding
    belongs to (``bound_to``) and still be bindable; otherwise the bind lost a race (422 ConcurrencyError)."""
    if now is None or now.uid != bound_to.uid:
        raise errors.BrokerError(
            errors.Reason.CONCURRENCY_ERROR, f"instance {instance_id!r} was deprovisioned while binding"
        )
    check_bindable(instance_id, now)


def unbind(
    *,
    binding_id: str,
    instance_id: str,
    service_id: str | None,
    plan_id: str | None,
    catalog: Catalog,
    existing: Record | None,
    accepts_incomplete: bool,
) -> Decision:
    """DELETE: works on half-created bindings too (orphan mitigation)."""
    service_id = errors.require_query("service_id", service_id)
    plan_id = errors.require_query("plan_id", plan_id)
    if existing is None:
        raise errors.BrokerError(errors.Reason.GONE, f"binding {binding_id!r} does not exist")
    if existing.spec.get("instanceId") != instance_id:
        raise errors.bad_request(f"binding {binding_id!r} belongs to another instance")
    if existing.spec.get("serviceId") != service_id:
        raise errors.bad_request(f"binding {binding_id!r} is not a binding of service_id {service_id!r}")
    offering = catalog.offering(service_id, str(existing.spec.get("planId"))) or catalog.offering(service_id, plan_id)
    asynchronous = offering.asynchronous_binding if offering is not None else False
    if asynchronous and not accepts_incomplete:
        raise errors.BrokerError(
            errors.Reason.ASYNC_REQUIRED,
            "this service plan unbinds asynchronously; repeat the request with accepts_incomplete=true",
        )
    if existing.deleting:
        token = Token.of(OperationType.UNBIND, existing)
        return accepted(token) if asynchronous else Wait(token)
    return Remove(asynchronous=asynchronous)


def fetch(*, binding_id: str, instance_id: str, catalog: Catalog, existing: Record | None) -> Credentials:
    """GET: 404 unless the binding exists for this instance and its bind has succeeded."""
    if existing is None or existing.spec.get("instanceId") != instance_id:
        raise errors.BrokerError(errors.Reason.NOT_FOUND, f"binding {binding_id!r} does not exist")
    service = catalog.service(str(existing.spec.get("serviceId")))
    if service is not None and not service.bindings_retrievable:
        raise errors.bad_request(f"bindings of service {service.name!r} are not retrievable")
    if is_removing(existing) or existing.state != SUCCEEDED:
        raise errors.BrokerError(errors.Reason.NOT_FOUND, f"binding {binding_id!r} is not ready (bind in progress)")
    return Credentials(200, with_parameters=True)
