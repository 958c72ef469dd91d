"""The catalog the broker serves: SFService / SFPlan specs, looked up by OSB id, rendered as ``/v2/catalog``.

Also the per-plan facts the decisions need (async or not, updatable, bindable, retrievable), with the
OSB defaulting rules in one place: a plan's ``bindable`` / ``plan_updateable`` override the service's.

The repository hands :func:`read` the objects of the trusted namespaces only (the control-plane namespace, or
the configured ``--catalog-namespace`` list: as the controller). An id two of them declare is served by
neither — never first- or last-writer-wins — and the controller reports both (``DuplicateId``).

Pure: built from already-read objects.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from opbroker.api.catalog import Manager, SFPlan, SFPlanSpec, SFService, SFServiceSpec
from opbroker.api.conventions import catalog_id
from opbroker.api.errors import field_errors
from opbroker.broker import bodies, errors


@dataclass(frozen=True)
class Offering:
    """A service and the plan a request names, resolved and checked against each other."""

    service: SFServiceSpec
    plan: SFPlanSpec

    @property
    def manager(self) -> Manager:
        return self.plan.manager or Manager()

    @property
    def asynchronous(self) -> bool:
        return self.manager.async_

    @property
    def asynchronous_binding(self) -> bool:
        return self.manager.async_binding

    @property
    def bindable(self) -> bool:
        return self.plan.bindable if self.plan.bindable is not None else self.service.bindable

    @property
    def plan_updatable(self) -> bool:
        return self.plan.plan_updatable if self.plan.plan_updatable is not None else self.service.plan_updatable

    @property
    def requires_app(self) -> bool:
        """Whether bind needs ``bind_resource.app_guid``: ``requiresApp: true`` in the plan's or service's context."""
        for context in (self.plan.context, self.service.context):
            if context and "requiresApp" in context:
                return bool(context["requiresApp"])
        return False

    def schema(self, action: str) -> dict[str, Any] | None:
        """The JSON schema for ``create``/``update`` (instance) or ``bind`` parameters, if the plan has one."""
        schemas = self.plan.schemas
        if schemas is None:
            return None
        holder = None
        if action in ("create", "update") and schemas.service_instance is not None:
            holder = getattr(schemas.service_instance, action)
        elif action == "bind" and schemas.service_binding is not None:
            holder = schemas.service_binding.create
        return holder.parameters if holder is not None else None


class Catalog:
    """Every service and plan of the trusted namespaces, by OSB id. Services without plans are hidden; an id
    declared twice (``duplicates``, or twice among the specs given) is served by neither, nor are the plans of
    a service so declared."""

    def __init__(
        self,
        services: Iterable[SFServiceSpec],
        plans: Iterable[SFPlanSpec],
        withdrawn: Iterable[str] = (),
        duplicates: Iterable[str] = (),
    ) -> None:
        #: Plans being deleted (their SFPlan has a deletionTimestamp): not offered, no new instances; their
        #: existing instances keep working (update, bind, unbind, deprovision) until they are gone.
        self._withdrawn = frozenset(withdrawn)
        services, plans = list(services), list(plans)
        #: Ids more than one object declares (services' and plans' alike): never served.
        self._duplicates = frozenset(duplicates) | _repeated(s.id for s in services) | _repeated(p.id for p in plans)
        self._services = {s.id: s for s in services if s.id not in self._duplicates}
        self._plans = {p.id: p for p in plans if p.id not in self._duplicates and p.service_id in self._services}

    def service(self, service_id: str) -> SFServiceSpec | None:
        return self._services.get(service_id)

    def plan(self, plan_id: str) -> SFPlanSpec | None:
        return self._plans.get(plan_id)

    def _unknown(self, what: str, osb_id: str) -> errors.BrokerError:
        if osb_id in self._duplicates:
            return errors.bad_request(
                f"{what} {osb_id!r} is not offered: more than one catalog entry declares it (the platform team "
                "must remove one)"
            )
        return errors.bad_request(f"{what} {osb_id!r} is not in this broker's catalog")

    def check_offered(self, plan_id: str) -> None:
        """400 for a plan being withdrawn: it takes no new instances (nor instances moved onto it)."""
        if plan_id in self._withdrawn:
            raise errors.bad_request(
                f"plan_id {plan_id!r} is being withdrawn from this broker's catalog; it takes no new instances"
            )

    def plans_of(self, service_id: str) -> list[SFPlanSpec]:
        return [plan for plan in self._plans.values() if plan.service_id == service_id]

    def resolve(self, service_id: str, plan_id: str) -> Offering:
        """The service and plan a request names; 400 when either is unknown or they do not belong together."""
        service = self.service(service_id)
        if service is None:
            raise self._unknown("service_id", service_id)
        plan = self.plan(plan_id)
        if plan is None:
            raise self._unknown("plan_id", plan_id)
        if plan.service_id != service.id:
            raise errors.bad_request(f"plan_id {plan_id!r} is not a plan of service_id {service_id!r}")
        return Offering(service, plan)

    def offering(self, service_id: str, plan_id: str) -> Offering | None:
        """Like :meth:`resolve` but ``None`` instead of an error (for objects whose plan may have gone)."""
        try:
            return self.resolve(service_id, plan_id)
        except errors.BrokerError:
            return None

    def body(self) -> bodies.CatalogBody:
        """The ``/v2/catalog`` response."""
        services = []
        for service in self._services.values():
            plans = [_plan_body(plan) for plan in self.plans_of(service.id) if plan.id not in self._withdrawn]
            if plans:
                services.append(_service_body(service, plans))
        return bodies.CatalogBody(services=services)


def _repeated(ids: Iterable[str]) -> frozenset[str]:
    return frozenset(osb_id for osb_id, count in Counter(ids).items() if count > 1)


def read(services: Iterable[Mapping[str, Any]], plans: Iterable[Mapping[str, Any]]) -> tuple[Catalog, list[str]]:
    """The catalog of these SFService and SFPlan objects (those of the trusted namespaces), and what was skipped
    and why (to log). An object that does not fit the model is skipped, but the id it declares still counts: an
    invalid SFPlan declaring a served plan's id makes that id a duplicate, as the controller sees it."""
    problems: list[str] = []
    ids: list[str] = []
    service_specs: list[SFServiceSpec] = []
    for item in services:
        ids.append(catalog_id(item))
        try:
            service_specs.append(SFService.model_validate(item).spec)
        except ValidationError as exc:
            problems.append(f"skipping SFService {_ref(item)}: {'; '.join(field_errors(exc))}")
    plan_ids: list[str] = []
    plan_specs: list[SFPlanSpec] = []
    withdrawn: list[str] = []
    for item in plans:
        plan_ids.append(catalog_id(item))
        try:
            spec = SFPlan.model_validate(item).spec
        except ValidationError as exc:
            problems.append(f"skipping SFPlan {_ref(item)}: {'; '.join(field_errors(exc))}")
            continue
        plan_specs.append(spec)
        if (item.get("metadata") or {}).get("deletionTimestamp"):
            withdrawn.append(spec.id)
    duplicates = _repeated(ids) | _repeated(plan_ids)
    for osb_id in sorted(duplicates):
        problems.append(f"not serving id {osb_id!r}: more than one catalog entry declares it")
    return Catalog(service_specs, plan_specs, withdrawn, duplicates), problems


def _ref(item: Mapping[str, Any]) -> str:
    meta = item.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _service_body(service: SFServiceSpec, plans: list[bodies.PlanBody]) -> bodies.ServiceBody:
    client = service.dashboard_client
    return bodies.ServiceBody(
        name=service.name,
        id=service.id,
        description=service.description,
        tags=service.tags,
        requires=service.requires,
        bindable=service.bindable,
        instances_retrievable=service.instances_retrievable,
        bindings_retrievable=service.bindings_retrievable,
        allow_context_updates=service.allow_context_updates,
        metadata=service.metadata,
        dashboard_client=(
            bodies.DashboardClientBody(id=client.id, secret=client.secret, redirect_uri=client.redirect_uri)
            if client is not None
            else None
        ),
        plan_updateable=service.plan_updatable,
        plans=plans,
    )


def _plan_body(plan: SFPlanSpec) -> bodies.PlanBody:
    schemas = None
    if plan.schemas is not None:
        instance = plan.schemas.service_instance
        binding = plan.schemas.service_binding
        schemas = bodies.SchemasBody(
            service_instance=(
                bodies.InstanceSchemasBody(
                    create=_input(instance.create.parameters if instance.create else None),
                    update=_input(instance.update.parameters if instance.update else None),
                )
                if instance is not None
                else None
            ),
            service_binding=(
                bodies.BindingSchemasBody(create=_input(binding.create.parameters if binding.create else None))
                if binding is not None
                else None
            ),
        )
    info = plan.maintenance_info
    return bodies.PlanBody(
        id=plan.id,
        name=plan.name,
        description=plan.description,
        metadata=plan.metadata,
        free=plan.free,
        bindable=plan.bindable,
        plan_updateable=plan.plan_updatable,
        schemas=schemas,
        maximum_polling_duration=plan.maximum_polling_duration,
        maintenance_info=bodies.MaintenanceInfoBody(version=info.version, description=info.description)
        if info
        else None,
    )


def _input(parameters: dict[str, Any] | None) -> bodies.InputParameters | None:
    return bodies.InputParameters(parameters=parameters) if parameters is not None else None
