"""The OSB v2.17 routes. Each one: read the stored objects, ask the pure core, perform what it decided.

Authentication and the API-version check happen before routing (see :mod:`opbroker.broker.app`); the
header parameters declared here document them in the OpenAPI schema and decode the identity headers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBasic

from opbroker.api.conventions import resource_name
from opbroker.broker import bindings, bodies, decisions, errors, headers, instances, namespaces, operations, records
from opbroker.broker.documentation import responses
from opbroker.broker.effects import RECHECK_SECONDS, Effects
from opbroker.broker.operations import OperationType, Token
from opbroker.broker.records import Kind, Record
from opbroker.broker.repository import Repository
from opbroker.broker.settings import Settings

log = logging.getLogger("opbroker.broker")

ApiVersion = Literal["2.12", "2.13", "2.14", "2.15", "2.16", "2.17"]
assert set(ApiVersion.__args__) == set(headers.SUPPORTED_VERSIONS)  # type: ignore[attr-defined]


async def request_meta(
    api_version: Annotated[
        ApiVersion, Header(alias=headers.VERSION_HEADER, description="OSB API version (412 if missing or unsupported).")
    ],
    originating_identity: Annotated[
        str | None,
        Header(
            alias=headers.ORIGINATING_IDENTITY_HEADER,
            description="`<platform> <base64 of a JSON object>`: recorded on the objects the request changes.",
        ),
    ] = None,
    request_identity: Annotated[
        str | None,
        Header(alias=headers.REQUEST_IDENTITY_HEADER, description="Echoed in the response and recorded."),
    ] = None,
) -> headers.RequestMeta:
    return headers.RequestMeta(
        originating_identity=headers.parse_originating_identity(originating_identity),
        request_identity=headers.request_identity(request_identity),
        api_version=headers.check_api_version(api_version),
    )


class Broker:
    """What the routes need: settings, the repository, the effects and the allowed namespaces."""

    def __init__(self, settings: Settings, repository: Repository) -> None:
        self.settings = settings
        self.repository = repository
        self.effects = Effects(repository, settings)
        self.namespaces = namespaces.NamespacePolicy.of(
            default=settings.default_instance_namespace,
            names=settings.allowed_namespaces,
            selector=settings.allowed_namespace_selector,
        )

    def admit(self, context: Mapping[str, Any] | None) -> None:
        """400 unless the platform allows the namespace ``context`` names (decided by the pure core; the
        Namespace's labels are read only when the decision needs them)."""
        namespace = namespaces.context_namespace(context)
        labels = None
        if namespace is not None and self.namespaces.needs_labels(namespace):
            labels = self.repository.namespace_labels(namespace)
        namespaces.admit(namespace, self.namespaces, labels)


async def broker_of(request: Request) -> Broker:
    broker: Broker = request.app.state.broker
    return broker


# The dependencies are ``async`` (pure, no I/O): FastAPI runs a plain ``def`` dependency on a worker thread, a hop
# each (a wake-up of the event loop and a thread switch); the route, which calls the API server, needs the only one.
Meta = Annotated[headers.RequestMeta, Depends(request_meta)]
Service = Annotated[Broker, Depends(broker_of)]
InstanceId = Annotated[str, Path(min_length=1, description="OSB instance id.")]
BindingId = Annotated[str, Path(min_length=1, description="OSB binding id.")]
AcceptsIncomplete = Annotated[bool, Query(description="The client can poll last_operation (asynchronous answers).")]
RequiredId = Annotated[str, Query(min_length=1)]
Hint = Annotated[str | None, Query(description="A hint; not checked.")]
OperationParam = Annotated[
    str | None,
    Query(
        max_length=10000,
        description="The operation token from the 202 answer. Any other value (one this broker never issued, "
        "or a token of another object) is answered like no value: with the object's current operation.",
    ),
]

router = APIRouter(prefix="/v2", dependencies=[Security(HTTPBasic(auto_error=False))])

#: Rounds of read-decide-write an update or a deprovision makes before answering 422 ConcurrencyError: a round is
#: lost only when the instance changed between its read and the guarded write (a controller status write — the
#: operator's live status, the controller's record of a check — or another request), and the next decides again.
DECIDE_ATTEMPTS = 5


def _accepted_instance(token: Token, record: Record) -> decisions.Answer:
    return decisions.accepted(token, bodies.ProvisionBody(dashboard_url=record.dashboard_url))


# -- catalog -------------------------------------------------------------------------------------------


@router.get(
    "/catalog",
    summary="The services and plans of the control-plane namespace",
    responses=responses(ok={200: ("The catalog.", bodies.CatalogBody)}),
)
def catalog(meta: Meta, broker: Service) -> JSONResponse:
    return JSONResponse(broker.repository.catalog().body().wire())


# -- service instances ---------------------------------------------------------------------------------


@router.put(
    "/service_instances/{instance_id}",
    summary="Provision a service instance",
    responses=responses(
        409,
        422,
        500,
        504,
        ok={
            200: ("Identical instance already provisioned.", bodies.ProvisionBody),
            201: ("Provisioned (synchronous plan).", bodies.ProvisionBody),
        },
        accepted=bodies.ProvisionBody,
    ),
)
def provision(
    instance_id: InstanceId,
    body: bodies.ProvisionRequest,
    meta: Meta,
    broker: Service,
    accepts_incomplete: AcceptsIncomplete = False,
) -> JSONResponse:
    settings, repository = broker.settings, broker.repository
    body = bodies.as_of(body, meta.api_version)
    broker.admit(body.context)
    name = resource_name(instance_id)
    namespace = instances.namespace_for(
        body.context, default=settings.default_instance_namespace, from_context=settings.context_namespaces
    )
    catalog = repository.catalog(wanting=(body.service_id, body.plan_id))
    for attempt in range(2):  # a second round only if another request created the same instance meanwhile
        existing = repository.find(Kind.INSTANCE, name, hints=[namespace], before_create=attempt == 0)
        decision = instances.provision(
            body, instance_id=instance_id, catalog=catalog, existing=existing, accepts_incomplete=accepts_incomplete
        )
        if not isinstance(decision, decisions.Create):
            return broker.effects.conclude(decision, existing, accepts_incomplete=accepts_incomplete)
        spec = records.instance_spec(instance_id, body)
        manifest = records.instance_object(name=name, namespace=namespace, spec=spec, meta=meta, shards=settings.shards)
        record = broker.effects.record_new(Kind.INSTANCE, manifest, OperationType.PROVISION)
        if record is None:
            continue
        token = Token.of(OperationType.PROVISION, record)
        log.info("provision instance %s/%s plan=%s request=%s", namespace, name, body.plan_id, meta.request_identity)
        if decision.asynchronous:
            return broker.effects.reply(_accepted_instance(token, record))
        return broker.effects.settle(token, created=True, accepts_incomplete=accepts_incomplete)
    raise errors.BrokerError(errors.Reason.CONCURRENCY_ERROR, "the instance is being created concurrently; repeat")


@router.patch(
    "/service_instances/{instance_id}",
    summary="Update a service instance (plan, parameters, context, maintenance_info)",
    responses=responses(
        422,
        500,
        504,
        ok={200: ("Updated, or nothing to change.", bodies.ProvisionBody)},
        accepted=bodies.ProvisionBody,
    ),
)
def update(
    instance_id: InstanceId,
    body: bodies.UpdateRequest,
    meta: Meta,
    broker: Service,
    accepts_incomplete: AcceptsIncomplete = False,
) -> JSONResponse:
    repository = broker.repository
    body = bodies.as_of(body, meta.api_version)
    broker.admit(body.context)
    # A plan registered a moment ago is never refused (as for provision): the new plan id is wanted.
    catalog = repository.catalog(wanting=(body.service_id, body.plan_id))
    for _ in range(DECIDE_ATTEMPTS):  # another round only if the instance changed after it was read
        existing = repository.find(Kind.INSTANCE, resource_name(instance_id))
        decision = instances.update(
            body, instance_id=instance_id, catalog=catalog, existing=existing, accepts_incomplete=accepts_incomplete
        )
        if not isinstance(decision, decisions.Change):
            return broker.effects.conclude(decision, existing, accepts_incomplete=accepts_incomplete)
        assert existing is not None
        token = broker.effects.record_change(existing, decision.spec, meta)
        if token is None:
            continue
        log.info("update instance %s/%s request=%s", existing.namespace, existing.name, meta.request_identity)
        if decision.asynchronous:
            return broker.effects.reply(_accepted_instance(token, existing))
        return broker.effects.settle(token, created=False, accepts_incomplete=accepts_incomplete)
    raise errors.BrokerError(errors.Reason.CONCURRENCY_ERROR, "the instance keeps changing; repeat the update")


@router.delete(
    "/service_instances/{instance_id}",
    summary="Deprovision a service instance (also while it is being provisioned)",
    responses=responses(
        410, 422, 500, 504, ok={200: ("Deprovisioned.", bodies.EmptyBody)}, accepted=bodies.OperationBody
    ),
)
def deprovision(
    instance_id: InstanceId,
    service_id: RequiredId,
    plan_id: RequiredId,
    meta: Meta,
    broker: Service,
    accepts_incomplete: AcceptsIncomplete = False,
) -> JSONResponse:
    repository = broker.repository
    waited = False
    for _ in range(DECIDE_ATTEMPTS):  # another round only if the instance changed after it was read
        existing = repository.find(Kind.INSTANCE, resource_name(instance_id))
        live = 0
        if existing is not None and not existing.deleting:
            blocking, unsettled = instances.binding_census(repository.bindings_of(existing))
            if unsettled and not blocking and not waited:
                repository.await_settled(unsettled, RECHECK_SECONDS)
                waited = True
                continue
            live = blocking + len(unsettled)
        decision = instances.deprovision(
            instance_id=instance_id,
            service_id=service_id,
            plan_id=plan_id,
            catalog=repository.catalog(),
            existing=existing,
            live_bindings=live,
            accepts_incomplete=accepts_incomplete,
        )
        if not isinstance(decision, decisions.Remove):
            return broker.effects.conclude(decision, existing, accepts_incomplete=accepts_incomplete)
        assert existing is not None
        token = broker.effects.record_deprovision(existing, meta, instance_id)
        if token is None:
            continue
        log.info("deprovision %s/%s request=%s", existing.namespace, existing.name, meta.request_identity)
        if decision.asynchronous:
            return broker.effects.reply(decisions.accepted(token))
        return broker.effects.settle(token, created=False, accepts_incomplete=accepts_incomplete)
    raise errors.BrokerError(errors.Reason.CONCURRENCY_ERROR, "the instance keeps changing; repeat the deprovision")


@router.get(
    "/service_instances/{instance_id}",
    summary="Fetch a service instance (instances_retrievable)",
    responses=responses(404, 422, ok={200: ("The instance.", bodies.InstanceBody)}),
)
def fetch_instance(
    instance_id: InstanceId, meta: Meta, broker: Service, service_id: Hint = None, plan_id: Hint = None
) -> JSONResponse:
    repository = broker.repository
    existing = repository.find(Kind.INSTANCE, resource_name(instance_id))
    return broker.effects.reply(
        instances.fetch(instance_id=instance_id, catalog=repository.catalog(), existing=existing)
    )


def _polled(broker: Broker, kind: Kind, name: str, token: Token | None) -> Record | None:
    """The object a last_operation asks about: with a token (of this object), where the token says it was."""
    if token is not None:
        return broker.repository.get(kind, token.namespace, name)
    return broker.repository.find(kind, name)


@router.get(
    "/service_instances/{instance_id}/last_operation",
    summary="Poll the last operation on a service instance",
    responses=responses(410, ok={200: ("The operation's state.", bodies.LastOperationBody)}, ok_retry_after=True),
)
def instance_last_operation(
    instance_id: InstanceId,
    meta: Meta,
    broker: Service,
    operation: OperationParam = None,
    service_id: Hint = None,
    plan_id: Hint = None,
) -> JSONResponse:
    name = resource_name(instance_id)
    token = operations.recognise(operation, Kind.INSTANCE, name)
    record = _polled(broker, Kind.INSTANCE, name, token)
    return broker.effects.reply(decisions.last_operation(Kind.INSTANCE, name, token, record))


# -- service bindings ----------------------------------------------------------------------------------


@router.put(
    "/service_instances/{instance_id}/service_bindings/{binding_id}",
    summary="Bind",
    responses=responses(
        409,
        422,
        500,
        504,
        ok={
            200: ("Identical binding exists.", bodies.BindingBody),
            201: ("Bound (synchronous plan).", bodies.BindingBody),
        },
        accepted=bodies.OperationBody,
    ),
)
def bind(
    instance_id: InstanceId,
    binding_id: BindingId,
    body: bodies.BindRequest,
    meta: Meta,
    broker: Service,
    accepts_incomplete: AcceptsIncomplete = False,
) -> JSONResponse:
    settings, repository = broker.settings, broker.repository
    broker.admit(body.context)
    catalog = repository.catalog(wanting=(body.service_id, body.plan_id))
    instance = repository.find(Kind.INSTANCE, resource_name(instance_id))
    name = resource_name(binding_id)
    for attempt in range(3):  # again only if another request was creating the same binding meanwhile
        hints = [instance.namespace if instance else None]
        existing = repository.find(Kind.BINDING, name, hints=hints, before_create=attempt == 0)
        decision = bindings.bind(
            body,
            binding_id=binding_id,
            instance_id=instance_id,
            catalog=catalog,
            instance=instance,
            existing=existing,
            accepts_incomplete=accepts_incomplete,
        )
        if isinstance(decision, decisions.Recheck):
            assert existing is not None
            repository.wait(
                Kind.BINDING,
                existing.namespace,
                name,
                functools.partial(decisions.settled, existing.uid),
                RECHECK_SECONDS,
            )
            continue
        if not isinstance(decision, decisions.Create):
            return broker.effects.conclude(decision, existing, accepts_incomplete=accepts_incomplete)
        assert instance is not None
        spec = records.binding_spec(binding_id, instance_id, body, accepts_incomplete)
        manifest = records.binding_object(name=name, instance=instance, spec=spec, meta=meta, shards=settings.shards)
        record = broker.effects.record_binding(instance, manifest, instance_id)
        if record is None:
            continue
        token = Token.of(OperationType.BIND, record)
        log.info("bind %s/%s to instance %s request=%s", record.namespace, name, instance.name, meta.request_identity)
        if decision.asynchronous:
            return broker.effects.reply(decisions.accepted(token))
        return broker.effects.settle(token, created=True, accepts_incomplete=accepts_incomplete)
    raise errors.BrokerError(errors.Reason.CONCURRENCY_ERROR, "the binding is being created concurrently; repeat")


def _binding(broker: Broker, instance_id: str, binding_id: str) -> Record | None:
    """The binding ``binding_id`` of instance ``instance_id``: where the namespace index says it is (one GET), else
    beside the instance (a binding lives in its instance's namespace), found first."""
    repository, name = broker.repository, resource_name(binding_id)
    located = repository.located(Kind.BINDING, name)
    if located is not None and located.spec.get("instanceId") == instance_id:
        return located
    instance = repository.find(Kind.INSTANCE, resource_name(instance_id))
    hints = [instance.namespace] if instance is not None else []
    return repository.find(Kind.BINDING, name, hints=hints)


@router.delete(
    "/service_instances/{instance_id}/service_bindings/{binding_id}",
    summary="Unbind (also while the binding is being created)",
    responses=responses(410, 422, 500, 504, ok={200: ("Unbound.", bodies.EmptyBody)}, accepted=bodies.OperationBody),
)
def unbind(
    instance_id: InstanceId,
    binding_id: BindingId,
    service_id: RequiredId,
    plan_id: RequiredId,
    meta: Meta,
    broker: Service,
    accepts_incomplete: AcceptsIncomplete = False,
) -> JSONResponse:
    existing = _binding(broker, instance_id, binding_id)
    decision = bindings.unbind(
        binding_id=binding_id,
        instance_id=instance_id,
        service_id=service_id,
        plan_id=plan_id,
        catalog=broker.repository.catalog(),
        existing=existing,
        accepts_incomplete=accepts_incomplete,
    )
    return _remove(broker, decision, existing, OperationType.UNBIND, meta, accepts_incomplete)


@router.get(
    "/service_instances/{instance_id}/service_bindings/{binding_id}",
    summary="Fetch a service binding (bindings_retrievable)",
    responses=responses(404, 500, ok={200: ("The binding.", bodies.BindingBody)}),
)
def fetch_binding(
    instance_id: InstanceId,
    binding_id: BindingId,
    meta: Meta,
    broker: Service,
    service_id: Hint = None,
    plan_id: Hint = None,
) -> JSONResponse:
    existing = _binding(broker, instance_id, binding_id)
    outcome = bindings.fetch(
        binding_id=binding_id, instance_id=instance_id, catalog=broker.repository.catalog(), existing=existing
    )
    return broker.effects.reply(outcome, existing)


@router.get(
    "/service_instances/{instance_id}/service_bindings/{binding_id}/last_operation",
    summary="Poll the last operation on a service binding",
    responses=responses(410, ok={200: ("The operation's state.", bodies.LastOperationBody)}, ok_retry_after=True),
)
def binding_last_operation(
    instance_id: InstanceId,
    binding_id: BindingId,
    meta: Meta,
    broker: Service,
    operation: OperationParam = None,
    service_id: Hint = None,
    plan_id: Hint = None,
) -> JSONResponse:
    name = resource_name(binding_id)
    token = operations.recognise(operation, Kind.BINDING, name)
    record = _polled(broker, Kind.BINDING, name, token)
    if token is None and record is not None and record.spec.get("instanceId") != instance_id:
        record = None
    return broker.effects.reply(decisions.last_operation(Kind.BINDING, name, token, record))


def _remove(
    broker: Broker,
    decision: decisions.Decision,
    existing: Record | None,
    operation: OperationType,
    meta: headers.RequestMeta,
    accepts_incomplete: bool,
) -> JSONResponse:
    """Carry out an unbind decision: answer it, or record the removal and answer (or wait)."""
    if not isinstance(decision, decisions.Remove):
        return broker.effects.conclude(decision, existing, accepts_incomplete=accepts_incomplete)
    assert existing is not None
    token = broker.effects.record_removal(existing, operation, meta)
    log.info("%s %s/%s request=%s", operation.value, existing.namespace, existing.name, meta.request_identity)
    if decision.asynchronous:
        return broker.effects.reply(decisions.accepted(token))
    return broker.effects.settle(token, created=False, accepts_incomplete=accepts_incomplete)
