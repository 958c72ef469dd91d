"""Reconciling an Instance: provision, update and deprovision it through its broker, one operation at a time.

observe resolves the class, plan and broker, merges the parameters and reads the clock and the key's pacing;
plan (:mod:`.core.instance_plan`, pure) decides every step and every answer's outcome; act only runs the
actions through the one executor (the OSB calls are effects: :mod:`.effects`). The OSB operation protocol —
recording, polling, deadline, orphan mitigation, refusals — is decided by :mod:`.core.operations`, shared with
Bindings. The rules, from the Service Catalog design and the OSB spec:

* the instance id (``status.externalID``) and the operation are recorded *before* the request is sent, so a
  crash between the two is retried with the same id (brokers answer a repeat 200);
* no other operation starts while one is in flight (``asyncOpInProgress``): ``last_operation`` is polled,
  with backoff, honouring ``Retry-After``, up to a maximum duration after which the operation fails (the
  controller's ``--max-operation-seconds``, or the plan's OSB ``maximum_polling_duration`` when shorter);
* a provision whose outcome is unknown (5xx, a lost response, a malformed 201) starts orphan mitigation: a
  deprovision, before anything else happens, then the provision is retried with the same id; a provision
  the broker reports failed or that timed out is marked failed at once, mitigated alike, and waits for a
  spec change;
* a new Instance of a class removed from its broker's catalog is not provisioned (existing ones keep working);
* a permanent refusal (other 4xx) sets ``Failed`` and waits for a spec change; transient ones are retried;
* deleting an Instance that still has Bindings is held by the finalizer, and ``Ready`` names them (a Binding
  in a namespace the Instance does not share with does not count);
* the instance id is ``spec.externalID`` or one derived from the Instance's uid, never taken from the status
  (``tenancy``): an Instance that does not hold its chosen id — an earlier Instance has it — sends nothing for
  it, not even a deprovision when deleted, and one whose chosen id the broker refuses to create (409: someone
  else's) fails with ``ExternalIDInUse`` and is deleted without a deprovision; one whose chosen id breaks the OSB
  id rule (made before the schema refused it) fails with ``InvalidExternalID`` and sends nothing, ever.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any, ClassVar

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.controller.budgets import Budgeting
from opbroker.controller.core.reasons import Reason
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.executor import Executor, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.memory import Memories
from opbroker.controller.runtime.outcomes import Outcome
from opbroker.controller.runtime.policies import DEFAULTS, Policies
from opbroker.controller.runtime.showing import ShowsFailuresOnObject
from opbroker.controller.servicecatalog import effects
from opbroker.controller.servicecatalog.bindingrefs import BindingRef
from opbroker.controller.servicecatalog.common import Clients, Resolver, pacing
from opbroker.controller.servicecatalog.core import admission, instance_plan, tenancy
from opbroker.controller.servicecatalog.core.instance_plan import (
    InstanceFacts,
    Step,
    needs_update,
    next_step,
    properties,
)
from opbroker.controller.servicecatalog.core.offering import Unresolved
from opbroker.controller.servicecatalog.core.views import CatalogObject
from opbroker.controller.servicecatalog.resources import BINDINGS, INSTANCES, KINDS, CatalogApi

logger = logging.getLogger(__name__)

__all__ = ["InstanceFacts", "InstanceReconciler", "Step", "needs_update", "next_step", "properties"]


class InstanceReconciler(ShowsFailuresOnObject, ObservePlanAct[InstanceFacts, Any]):
    kind: ClassVar[str] = "scinstance"

    def __init__(
        self,
        api: CatalogApi,
        memories: Memories,
        *,
        control_plane: str = DEFAULT_NAMESPACE,
        max_operation_seconds: float = 3600.0,
        clock: Clock = SYSTEM,
        budgets: Budgeting | None = None,
        resync_seconds: float = 600.0,
        policies: Policies = DEFAULTS,
    ) -> None:
        """``clock``: the runtime's (timestamps, the operation deadline, when a poll is due); ``resync_seconds``:
        how often a settled Instance of an ``instances_retrievable`` class is looked at at its broker (0: never)."""
        self.api = api
        self.budgets = budgets if budgets is not None else Budgeting()
        """The namespace budgets a new operation is checked against (``controller.budgets``)."""
        self.resolver = Resolver(api, control_plane)
        self.clock = clock
        self.policies = policies
        """The timing table: its ``broker_polls`` (given up after ``max_operation_seconds``), ``broker_retries``
        and the draws jittering them."""
        self.polls = dataclasses.replace(policies.broker_polls, max_duration=max_operation_seconds)
        self.paces = effects.Paces(memories)
        self.looks = effects.Looks(memories)
        self.resync_seconds = resync_seconds
        self.transport: Any = None
        self.clients = Clients()
        target = Target(api.kube, KINDS[INSTANCES], self.kind)
        self.executor = Executor(target, effects.effects(self.clients, lambda: self.transport, self.paces, self.looks))

    # -- observe / plan / act ------------------------------------------------------------------------------

    def observe(self, key: Key) -> InstanceFacts | None:
        body = self.api.get(INSTANCES, key.namespace, key.name)
        if body is None:
            return None
        instance = CatalogObject.of(body)
        spec, status, deleting = instance.instance_spec, instance.status, instance.meta.deleting
        offering = parameters = problem = None
        try:
            # The plan the broker has the instance on (or is being asked for, mid-operation).
            held = status.held_plan if status.external_properties else status.asked_plan
            plan_name = (held.name or None) if deleting else None
            offering = self.resolver.offering(spec, plan_name, held)
            parameters = (
                None if deleting else self.resolver.parameters(key.namespace, spec.parameters, spec.parameters_from)
            )
            if not deleting and offering.service_class.removed and not status.provisioned:
                raise Unresolved(
                    Reason.REFERENCES_REMOVED_CLASS,
                    f"service class {offering.service_class.meta.name!r} was removed from broker "
                    f"{offering.service_class.broker_name!r}'s catalog: no new instance can be provisioned "
                    "from it (existing ones keep working)",
                )
        except Unresolved as exc:
            problem = exc
        owns_id = not tenancy.chosen(instance) or tenancy.holds_external_id(
            instance, map(CatalogObject.of, self.api.list(INSTANCES))
        )
        invalid = tenancy.id_problem(instance)
        if invalid is not None:
            problem = Unresolved(
                Reason.INVALID_EXTERNAL_ID,
                f"externalID: {invalid}; this Instance sends nothing for it (and is deleted without a deprovision): "
                "create the Instance again with a valid externalID, or none",
            )
        elif not owns_id:
            problem = Unresolved(
                Reason.EXTERNAL_ID_IN_USE,
                f"externalID {tenancy.external_id(instance)!r} is held by another Instance: this one sends nothing for "
                "it (and is deleted without a deprovision); create the Instance again with another externalID, or none",
            )
        bindings = self._bindings(instance) if deleting else ()
        desired = properties(offering, parameters, spec) if offering is not None and parameters is not None else None
        return InstanceFacts(
            key,
            body,
            offering,
            parameters,
            problem,
            bindings,
            owns_id,
            desired,
            pacing=self.paces.of(key),
            now=self.clock.now(),
            monotonic=self.clock.monotonic(),
            polls=pacing(self.polls, offering),
            retries=self.policies.broker_retries,
            rechecks=self.policies.unresolved_recheck,
            draw=self.policies.draw(),
            over_budget=self.budgets.refusal(key),
            last_look=self.looks.of(key),
            resync_seconds=self.resync_seconds,
        )

    @staticmethod
    def plan(facts: InstanceFacts) -> Sequence[Any]:
        return instance_plan.plan(facts)

    def reread(self, key: Key) -> None:
        """A guarded write met a conflict: the next observe reads the object from the API."""
        self.api.forget(INSTANCES, key.namespace, key.name)

    def act(self, facts: InstanceFacts, actions: Sequence[Any]) -> Outcome:
        return self.executor.run(facts.key, facts.body, actions)

    # -- helpers -------------------------------------------------------------------------------------------------

    def _bindings(self, instance: CatalogObject) -> tuple[str, ...]:
        return tuple(admission.bindings_of(instance, (BindingRef.of(b) for b in self.api.list(BINDINGS))))
