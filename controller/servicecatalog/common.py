"""What Instances and Bindings share at the edge: resolving class, plan and broker and the parameters
(:class:`Resolver`, reads), and one OSB client per broker (:class:`Clients`). The decisions are the plans'
(``core``). A parameter Secret's values are merged into ``parameters`` here and never written anywhere but the
request to the broker: the status keeps only a checksum.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from opbroker import osbclient
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.controller.core.reasons import Reason
from opbroker.controller.runtime.concurrency import Lock
from opbroker.controller.servicecatalog.core import operations
from opbroker.controller.servicecatalog.core.endpoints import (
    EndpointProblem,
    accepted_version,
    auth_secret_ref,
    endpoint,
)
from opbroker.controller.servicecatalog.core.offering import Offering, Unresolved
from opbroker.controller.servicecatalog.core.views import (
    BrokerView,
    InstanceSpec,
    PlanEntry,
    SecretKeyRef,
    ServiceClassView,
)
from opbroker.controller.servicecatalog.resources import BROKERS, CLASSES, CatalogApi
from opbroker.kubeclient.wire import JsonBody, JsonObject


class Resolver:
    def __init__(self, api: CatalogApi, control_plane: str = DEFAULT_NAMESPACE) -> None:
        self.api = api
        self.control_plane = control_plane
        """The only namespace a Broker's auth Secret is read from."""

    def service_class(self, name: str) -> ServiceClassView:
        """By object name, or by the broker's name for the service (``externalName``)."""
        found = self.api.get(CLASSES, "", name)
        if found is not None:
            return ServiceClassView.of(found)
        matches = [c for c in map(ServiceClassView.of, self.api.list(CLASSES)) if c.external_name == name]
        if len(matches) > 1:
            brokers = ", ".join(sorted(c.broker_name or "?" for c in matches))
            raise Unresolved(
                Reason.REFERENCES_NON_EXISTENT_CLASS,
                f"service class {name!r} is offered by several brokers ({brokers}): name its object instead",
            )
        if not matches:
            raise Unresolved(Reason.REFERENCES_NON_EXISTENT_CLASS, f"service class {name!r} does not exist")
        return matches[0]

    def offering(self, spec: InstanceSpec, plan_name: str | None = None, held: PlanEntry | None = None) -> Offering:
        """The class, plan and broker for an Instance ``spec`` (the plan ``plan_name`` if given). ``held``: the
        plan the Instance's status records the broker has it on (``externalProperties``): when a relist dropped
        that plan from the class, the instance keeps using it by its recorded id (to deprovision, unbind, stay
        Ready); only new provisions and plan changes need a plan the catalog lists."""
        service_class = self.service_class(spec.class_name)
        plans = service_class.plans
        wanted = plan_name or spec.plan_name or (held.name if held is not None else None)
        if not wanted:
            if len(plans) != 1:
                raise Unresolved(
                    Reason.REFERENCES_NON_EXISTENT_PLAN,
                    f"service class {service_class.meta.name!r} has {len(plans)} plans: name one in planName",
                )
            plan = plans[0]
        else:
            found = service_class.plan(wanted)
            if found is None and held is not None and wanted == held.name and held.external_id:
                found = held  # gone from the catalog since
            if found is None:
                raise Unresolved(
                    Reason.REFERENCES_NON_EXISTENT_PLAN,
                    f"service class {service_class.meta.name!r} has no plan {wanted!r}",
                )
            plan = found
        return Offering(service_class, plan, self.broker(service_class.broker_name))

    def broker(self, name: str) -> osbclient.Broker:
        body = self.api.get(BROKERS, "", name)
        if body is None:
            raise Unresolved(Reason.REFERENCES_NON_EXISTENT_BROKER, f"broker {name!r} does not exist")
        broker = BrokerView.of(body)
        try:
            ref = auth_secret_ref(broker.spec, control_plane=self.control_plane)  # raises before any read
            secret = self.api.secret_data(ref.namespace, ref.name) if ref else None
            return endpoint(broker.spec, secret, version=accepted_version(broker))
        except EndpointProblem as exc:
            raise Unresolved(exc.reason, f"broker {name!r}: {exc}") from exc

    def parameters(self, namespace: str, parameters: JsonObject, sources: Sequence[SecretKeyRef]) -> JsonBody:
        """``parameters`` with every ``parametersFrom`` Secret key's (``sources``) JSON object merged in.
        ``namespace``: the object's own — the only one its Secrets are read from (a ``secretKeyRef`` has no
        namespace field)."""
        merged = dict(parameters)
        for ref in sources:
            data = self.api.secret_data(namespace, ref.name)
            if data is None:
                raise Unresolved(
                    Reason.ERROR_PARAMETERS,
                    f"parametersFrom: Secret {ref.name!r} does not exist in namespace {namespace} (only the object's "
                    f"own namespace is read): create it with a key {ref.key!r} holding a JSON object; this is "
                    "retried until it exists",
                )
            if ref.key not in data:
                raise Unresolved(
                    Reason.ERROR_PARAMETERS,
                    f"parametersFrom: Secret {ref.name!r} in namespace {namespace} has no key {ref.key!r} "
                    f"(it has: {', '.join(sorted(data)) or 'none'}): add it, a JSON object; this is retried",
                )
            try:
                value = json.loads(data[ref.key])
            except json.JSONDecodeError:
                value = None
            if not isinstance(value, dict):
                raise Unresolved(
                    Reason.ERROR_PARAMETERS,
                    f"parametersFrom: Secret {ref.name!r} key {ref.key!r} is not a JSON object",
                )
            overlap = set(merged) & set(value)
            if overlap:
                raise Unresolved(
                    Reason.ERROR_PARAMETERS,
                    f"parametersFrom: Secret {ref.name!r} repeats parameter(s) {', '.join(sorted(overlap))}",
                )
            merged.update(value)
        return merged


def pacing(backoff: osbclient.Backoff, offering: Offering | None) -> osbclient.Backoff:
    """The poll pacing for an operation on ``offering``: :func:`operations.deadline` of its plan."""
    return operations.deadline(backoff, offering.plan if offering is not None else None)


class Clients:
    """One :class:`osbclient.Client` per broker endpoint, kept and shared by every reconcile, as the client
    asks: building one costs ~20 ms of CPU (its SSL context loads the trust store, even for http) and a new
    connection per call. A Broker whose URL, credentials or CA change resolves to another endpoint value and
    so gets a client of its own; beyond ``size`` endpoints the least recently used is dropped. Thread-safe
    (httpx's connection pool is)."""

    def __init__(self, size: int = 32) -> None:
        self._clients: OrderedDict[tuple[osbclient.Broker, int], osbclient.Client] = OrderedDict()
        self._lock = Lock()
        self._size = size

    def get(self, broker: osbclient.Broker, transport: Any = None) -> osbclient.Client:
        key = (broker, id(transport))
        with self._lock:
            found = self._clients.pop(key, None)
            if found is None:
                found = osbclient.Client(broker, transport=transport)
            self._clients[key] = found
            while len(self._clients) > self._size:
                self._clients.popitem(last=False)  # not closed: a reconcile may still be using it
            return found
