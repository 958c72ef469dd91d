"""What Instances and Bindings share at the edge: resolving class, plan and broker and the parameters
(:class:`Resolver`, reads), and one OSB client per broker (:class:`Clients`). The decisions are the plans'
(``core``). A parameter Secret's values are merged into ``parameters`` here and never written anywhere but the
request to the broker: the status keeps only a checksum.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from opbroker import osbclient
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.controller.core.reasons import Reason
from opbroker.controller.servicecatalog.core import operations
from opbroker.controller.servicecatalog.core.endpoints import (
    EndpointProblem,
    accepted_version,
    auth_secret_ref,
    endpoint,
)
from opbroker.controller.servicecatalog.core.offering import Offering, Unresolved
from opbroker.controller.servicecatalog.resources import BROKERS, CLASSES, CatalogApi


class Resolver:
    def __init__(self, api: CatalogApi, control_plane: str = DEFAULT_NAMESPACE) -> None:
        self.api = api
        self.control_plane = control_plane
        """The only namespace a Broker's auth Secret is read from."""

    def service_class(self, name: str) -> dict[str, Any]:
        """By object name, or by the broker's name for the service (``externalName``)."""
        found = self.api.get(CLASSES, "", name)
        if found is None:
            matches = [c for c in self.api.list(CLASSES) if c.get("externalName") == name]
            if len(matches) > 1:
                brokers = ", ".join(sorted(c.get("brokerName", "?") for c in matches))
                raise Unresolved(
                    Reason.REFERENCES_NON_EXISTENT_CLASS,
                    f"service class {name!r} is offered by several brokers ({brokers}): name its object instead",
                )
            found = matches[0] if matches else None
        if found is None:
            raise Unresolved(Reason.REFERENCES_NON_EXISTENT_CLASS, f"service class {name!r} does not exist")
        return found

    def offering(
        self, spec: Mapping[str, Any], plan_name: str | None = None, held: Mapping[str, Any] | None = None
    ) -> Offering:
        """The class, plan and broker for an Instance ``spec`` (the plan ``plan_name`` if given). ``held``: the
        Instance's ``status.externalProperties``, the plan the broker has it on: when a relist dropped that
        plan from the class, the instance keeps using it by its recorded id (to deprovision, unbind, stay
        Ready); only new provisions and plan changes need a plan the catalog lists."""
        service_class = self.service_class(spec["serviceClassName"])
        plans = service_class.get("plans") or []
        held = held or {}
        wanted = plan_name or spec.get("planName") or held.get("planName")
        if wanted is None:
            if len(plans) != 1:
                raise Unresolved(
                    Reason.REFERENCES_NON_EXISTENT_PLAN,
                    f"service class {service_class['metadata']['name']!r} has {len(plans)} plans: name one in planName",
                )
            plan = plans[0]
        else:
            plan = next((p for p in plans if p["name"] == wanted), None)
            if plan is None and wanted == held.get("planName") and held.get("planExternalID"):
                plan = {"name": wanted, "externalID": held["planExternalID"]}  # gone from the catalog since
            if plan is None:
                raise Unresolved(
                    Reason.REFERENCES_NON_EXISTENT_PLAN,
                    f"service class {service_class['metadata']['name']!r} has no plan {wanted!r}",
                )
        return Offering(service_class, plan, self.broker(service_class["brokerName"]))

    def broker(self, name: str) -> osbclient.Broker:
        body = self.api.get(BROKERS, "", name)
        if body is None:
            raise Unresolved(Reason.REFERENCES_NON_EXISTENT_BROKER, f"broker {name!r} does not exist")
        try:
            ref = auth_secret_ref(body["spec"], control_plane=self.control_plane)  # raises before any read
            secret = self.api.secret_data(ref[1], ref[2]) if ref else None
            return endpoint(body["spec"], secret, version=accepted_version(body))
        except EndpointProblem as exc:
            raise Unresolved(exc.reason, f"broker {name!r}: {exc}") from exc

    def parameters(self, namespace: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """``parameters`` with every ``parametersFrom`` Secret key's JSON object merged in. ``namespace``: the
        object's own — the only one its Secrets are read from (a ``secretKeyRef`` has no namespace field)."""
        merged = dict(spec.get("parameters") or {})
        for source in spec.get("parametersFrom") or []:
            ref = source["secretKeyRef"]
            data = self.api.secret_data(namespace, ref["name"])
            if data is None or ref["key"] not in data:
                raise Unresolved(
                    Reason.ERROR_PARAMETERS, f"parametersFrom: Secret {ref['name']!r} has no key {ref['key']!r}"
                )
            try:
                value = json.loads(data[ref["key"]])
            except json.JSONDecodeError:
                value = None
            if not isinstance(value, dict):
                raise Unresolved(
                    Reason.ERROR_PARAMETERS,
                    f"parametersFrom: Secret {ref['name']!r} key {ref['key']!r} is not a JSON object",
                )
            overlap = set(merged) & set(value)
            if overlap:
                raise Unresolved(
                    Reason.ERROR_PARAMETERS,
                    f"parametersFrom: Secret {ref['name']!r} repeats parameter(s) {', '.join(sorted(overlap))}",
                )
            merged.update(value)
        return merged


def pacing(backoff: osbclient.Backoff, offering: Offering | None) -> osbclient.Backoff:
    """The poll pacing for an operation on ``offering``: :func:`operations.deadline` of its plan."""
    return operations.deadline(backoff, offering.plan if offering is not None else None)


def removed(service_class: Mapping[str, Any]) -> bool:
    """Whether the class's service is gone from its broker's catalog (existing instances keep using it)."""
    return bool((service_class.get("status") or {}).get("removedFromBrokerCatalog"))


class Clients:
    """One :class:`osbclient.Client` per broker endpoint, kept and shared by every reconcile, as the client
    asks: building one costs ~20 ms of CPU (its SSL context loads the trust store, even for http) and a new
    connection per call. A Broker whose URL, credentials or CA change resolves to another endpoint value and
    so gets a client of its own; beyond ``size`` endpoints the least recently used is dropped. Thread-safe
    (httpx's connection pool is)."""

    def __init__(self, size: int = 32) -> None:
        self._clients: OrderedDict[tuple[osbclient.Broker, int], osbclient.Client] = OrderedDict()
        self._lock = threading.Lock()
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
