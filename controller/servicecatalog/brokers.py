"""Reconciling a Broker: fetch its catalog when a relist is due, keep its ServiceClasses in step, say so.

observe reads the Broker, its auth Secret (only from the control-plane namespace: one named elsewhere is
refused, ``AuthSecretNotInControlPlane``, unread) and — only when a relist is due — the catalog and the classes
held; plan (pure, :mod:`.core.broker_plan`) turns that into class writes and the Broker's status; act only runs
those actions through the one executor (the class writes are an effect whose refusals the pure
:func:`~.core.broker_plan.relisted` turns into the status written after them). A relist is due on a new or
changed spec, a bumped ``relistRequests``, a failed last attempt, or ``relistDuration`` after
the last success (``relistBehavior: Manual`` relists on request only).

The fetch speaks the version :func:`relisting.version_to_speak` picks and records the one the broker accepted
(``status.brokerAPIVersion``). One odd entry never hides the rest: services and plans that cannot be read or
represented are skipped, the others become classes, and condition ``CatalogComplete`` plus a warning event
name each one skipped (service, plan, field). A class the API server still refuses (400, 413, 422: the same
object would be refused again) is reported the same way after the writes, never retried hot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar

from kubernetes.client.exceptions import ApiException

from opbroker import osbclient
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.controller.core import refusals
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.shown_failures import broker_message
from opbroker.controller.core.views import Meta
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.executor import Executor, Run, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.objects import resource_version
from opbroker.controller.runtime.outcomes import Outcome
from opbroker.controller.runtime.policies import DEFAULTS, Policies
from opbroker.controller.runtime.showing import ShowsFailuresOnObject
from opbroker.controller.servicecatalog.core import broker_plan, relisting
from opbroker.controller.servicecatalog.core.broker_plan import BrokerFacts, WriteClasses
from opbroker.controller.servicecatalog.core.endpoints import EndpointProblem, auth_secret_ref, endpoint
from opbroker.controller.servicecatalog.core.relisting import ClassChanges
from opbroker.controller.servicecatalog.core.views import BrokerView, ServiceClassView
from opbroker.controller.servicecatalog.resources import BROKERS, CLASSES, KINDS, CatalogApi
from opbroker.kubeclient.wire import JsonBody, text_of

logger = logging.getLogger(__name__)


class BrokerReconciler(ShowsFailuresOnObject, ObservePlanAct[BrokerFacts, Any]):
    kind: ClassVar[str] = "scbroker"

    def __init__(
        self,
        api: CatalogApi,
        *,
        control_plane: str = DEFAULT_NAMESPACE,
        transport: Any = None,
        clock: Clock = SYSTEM,
        policies: Policies = DEFAULTS,
    ) -> None:
        self.api = api
        self.policies = policies
        """The timing table: a failed fetch is tried again after its ``broker_catalog``."""
        self.clock = clock
        """The runtime's: a relist is due by its wall clock (``status.lastCatalogRetrievalTime``)."""
        self.control_plane = control_plane
        """The only namespace a Broker's auth Secret is read from."""
        self.transport = transport
        target = Target(api.kube, KINDS[BROKERS], self.kind)
        self.executor = Executor(target, {WriteClasses: self._write})

    def observe(self, key: Key) -> BrokerFacts | None:
        body = self.api.get(BROKERS, "", key.name)
        if body is None:
            return None
        broker = BrokerView.of(body)
        if broker.meta.deleting:
            return None  # its classes go with it (owner references)
        now = self.clock.now()
        due_in = relisting.relist_due(broker, now)
        facts = BrokerFacts(key, broker, now, due_in)
        if due_in is None or due_in > 0:
            return facts
        try:
            catalog, spoken = self.fetch(broker)
        except EndpointProblem as exc:
            problem = (exc.reason, str(exc))
        except osbclient.BrokerError as exc:
            problem = (Reason.ERROR_FETCHING_CATALOG, broker_message(exc))
        else:
            classes = tuple(ServiceClassView.of(c) for c in self.api.list(CLASSES))
            return BrokerFacts(key, broker, now, due_in, catalog=catalog, classes=classes, spoken=spoken)
        retry_in = self.policies.delay(self.policies.broker_catalog)
        return BrokerFacts(key, broker, now, due_in, problem=problem, retry_in=retry_in)

    def fetch(self, broker: BrokerView) -> tuple[osbclient.catalog.Catalog, str]:
        """The catalog, read entry by entry, and the OSB version the broker accepted."""
        ref = auth_secret_ref(broker.spec, control_plane=self.control_plane)  # raises before any read
        secret = self.api.secret_data(ref.namespace, ref.name) if ref else None
        start = relisting.version_to_speak(broker)
        with osbclient.Client(endpoint(broker.spec, secret, version=start), transport=self.transport) as client:
            return client.read_catalog(), client.version

    @staticmethod
    def plan(facts: BrokerFacts) -> Sequence[Any]:
        return broker_plan.plan(facts)

    def reread(self, key: Key) -> None:
        """A guarded write met a conflict: the next observe reads the Broker from the API."""
        self.api.forget(BROKERS, "", key.name)

    def act(self, facts: BrokerFacts, actions: Sequence[Any]) -> Outcome:
        return self.executor.run(facts.key, facts.broker.wire, actions)

    def _write(self, run: Run, action: WriteClasses) -> None:
        """The class writes' effect: what the API server refused goes to the plan's continuation."""
        refused = self._write_classes(action.changes)
        if action.then is not None:
            for follow in action.then(refused, run.body):
                run.perform(follow)

    def _write_classes(self, changes: ClassChanges) -> list[osbclient.catalog.Problem]:
        """Write the classes; each one the API server refuses for good (400, 413, 422) is returned as a problem
        and the others are written all the same. Other failures (conflicts, an unavailable server) raise."""
        refused: list[osbclient.catalog.Problem] = []
        for body in changes.create:
            refused.extend(self._refusal(body, partial(self.api.create, CLASSES, body)))
        for body in changes.update:
            name = Meta.of(body.get("metadata")).name
            refused.extend(self._refusal(body, partial(self.api.patch, CLASSES, "", name, _replacement_patch(body))))
        for name in changes.removed:
            held = self.api.get(CLASSES, "", name)
            if held is not None:
                self.api.patch_status(CLASSES, held, {"removedFromBrokerCatalog": True}, guarded=False)
        for name in changes.restored:
            held = self.api.get(CLASSES, "", name)
            if held is not None:
                self.api.patch_status(CLASSES, held, {"removedFromBrokerCatalog": False}, guarded=False)
        return refused

    @staticmethod
    def _refusal(body: JsonBody, write: Callable[[], object]) -> list[osbclient.catalog.Problem]:
        try:
            write()
        except ApiException as exc:
            if refusals.severity(exc.status) is not refusals.Severity.PERMANENT:
                raise
            found = refusals.refusal(exc.status, exc.body, body)
            logger.warning("%s; the class is skipped", found.describe())
            service = text_of(body.get("externalName"))
            return [osbclient.catalog.Problem(service, None, "(object)", found.describe(), True)]
        return []


def _replacement_patch(body: JsonBody) -> JsonBody:
    """A merge patch making the class's top-level fields those of ``body`` (guarded by its version)."""
    patch = {k: v for k, v in body.items() if k not in ("status", "apiVersion", "kind", "metadata")}
    for key in ("tags", "requires", "externalMetadata"):
        patch.setdefault(key, None)
    version = resource_version(body)
    if version is None:
        raise ValueError("a class is written over only at the resourceVersion it was read at")
    patch["metadata"] = {"resourceVersion": version}
    return patch
