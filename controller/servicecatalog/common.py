"""What Instances and Bindings share: resolving class, plan and broker; parameters; status conditions.

Pure helpers, plus :class:`Resolver` (reads). A parameter Secret's values are merged into ``parameters``
here and never written anywhere but the request to the broker: the status keeps only a checksum.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from opbroker import osbclient
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.controller.core.decisions import ready_condition
from opbroker.controller.core.reasons import Reason
from opbroker.controller.reconciler import Key, Memories, Outcome, PerKey, requeue
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


class Tracking:
    """What a reconciler remembers of each key's operation between reconciles (lost on a restart, which then
    polls at once and starts the backoff over): the polls made, when the next poll is due (monotonic clock),
    and the transient failures in a row.

    The runtime may wake a key earlier than its poll is due — a watch event (the status write after a 202 is
    one), a re-check scheduled before the broker answered with ``Retry-After`` — so a poll first asks
    :meth:`early` and, while the time has not come, only requeues for the rest: ``Retry-After`` and the
    backoff hold however often the key is queued."""

    def __init__(
        self, memories: Memories, pacing: osbclient.Backoff, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``clock``: seconds of a monotonic clock (tests pass a fake one instead of sleeping)."""
        self.pacing = pacing
        self.clock = clock
        self.polls: PerKey[int] = memories.keep(PerKey())
        self.due: PerKey[float] = memories.keep(PerKey())
        self.retries: PerKey[int] = memories.keep(PerKey())

    def accepted(self, key: Key) -> Outcome:
        """The broker accepted an operation (202): the first poll after the pacing's base."""
        self.polls.put(key, 0)
        return self.schedule(key, self.pacing.base)

    def early(self, key: Key) -> Outcome | None:
        """A requeue for the rest of the wait when ``key``'s poll is not due yet, else None (poll now)."""
        due = self.due.get(key)
        wait = 0.0 if due is None else due - self.clock()
        return requeue(wait) if wait > 0.05 else None

    def poll(self, key: Key) -> int:
        """Count one more poll of ``key``'s operation; returns the count, this poll included."""
        polls = (self.polls.get(key) or 0) + 1
        self.polls.put(key, polls)
        return polls

    def schedule(self, key: Key, delay: float) -> Outcome:
        self.due.put(key, self.clock() + delay)
        return requeue(delay)

    def retry(self, key: Key) -> Outcome:
        """Requeue after one more transient failure (:func:`next_retry`)."""
        return requeue(next_retry(self.retries, key))

    def succeeded(self, key: Key) -> None:
        self.retries.forget(key)


def checksum(parameters: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parameters, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def now() -> datetime:
    return datetime.now(UTC)


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def conditions(
    body: Mapping[str, Any], *, ready: bool, reason: Reason, message: str, failed: bool = False
) -> list[dict[str, Any]]:
    """Ready as given; Failed=True only for a failure that waits for a spec change (no retries)."""
    status = body.get("status") or {}
    generation = (body.get("metadata") or {}).get("generation")
    listed = ready_condition(
        status.get("conditions"), ready=ready, reason=reason, message=message, generation=generation
    )
    listed = [c for c in listed if c.get("type") != "Failed"]
    if failed:
        listed.append(
            {
                "type": "Failed",
                "status": "True",
                "reason": reason.value,
                "message": message[:1024],
                "lastTransitionTime": timestamp(now()),
                "observedGeneration": generation,
            }
        )
    return listed


def say(api: CatalogApi, plural: str, body: dict[str, Any], *, ready: bool, reason: Reason, message: str) -> None:
    """Set the Ready condition and record an Event — unless it says so already (no write, no event)."""
    current: dict[str, Any] = next(
        (c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {}
    )
    if current.get("reason") == reason.value and current.get("message") == message[:1024]:
        return
    api.patch_status(plural, body, {"conditions": conditions(body, ready=ready, reason=reason, message=message)})
    api.kube.emit_event(body, reason=reason.value, message=message, warning=not ready)


def warn_ignored(api: CatalogApi, body: dict[str, Any], warnings: tuple[str, ...], what: str) -> None:
    """A warning event naming the optional fields of a broker's answer that were dropped (wrong type): the
    answer was used without them. Never values of credentials (the client does not quote those)."""
    if warnings:
        message = f"the broker's answer to the {what} had fields of the wrong type, ignored: " + "; ".join(warnings)
        api.kube.emit_event(body, reason=Reason.ANSWER_FIELDS_IGNORED.value, message=message, warning=True)


def mitigation_follows(
    api: CatalogApi, plural: str, body: dict[str, Any], *, reason: Reason, message: str, final: bool
) -> Outcome:
    """Record a creation (provision, bind) failed with orphan mitigation to follow (:func:`operations.mitigating`)
    and say so in an event; the mitigation runs on the next reconcile, at once."""
    listed = conditions(body, ready=False, reason=reason, message=f"{message}; orphan mitigation follows", failed=final)
    api.patch_status(plural, body, operations.mitigating(body, final=final, conditions=listed))
    api.kube.emit_event(body, reason=Reason.ORPHAN_MITIGATION.value, message=message, warning=True)
    return requeue(0)


def removal_failed(
    api: CatalogApi, plural: str, body: dict[str, Any], field: str, *, reason: Reason, message: str
) -> None:
    """Record a removal failed (:func:`operations.removal_failed`) and say so in an event; the caller requeues
    it after a backoff (an object being deleted has no spec to change: the removal is sent until it succeeds)."""
    listed = conditions(body, ready=False, reason=reason, message=f"{message}; retrying")
    api.patch_status(plural, body, operations.removal_failed(field, conditions=listed))
    api.kube.emit_event(body, reason=reason.value, message=message, warning=True)


def next_retry(retries: PerKey[int], key: Key, *, base: float = 1.0, maximum: float = 60.0) -> float:
    """Seconds before retrying ``key`` after one more transient failure: doubling from ``base`` up to
    ``maximum`` (the count is forgotten on success)."""
    attempts = (retries.get(key) or 0) + 1
    retries.put(key, attempts)
    return float(min(base * 2.0 ** min(attempts - 1, 16), maximum))
