"""Reconciling a Binding: bind through the instance's broker, put the credentials in a Secret, unbind on delete.

The credentials go into the Secret named by ``spec.secretName`` (default: the binding's name), in the
binding's namespace, owned by the binding — never into a status, an event or a log. A Binding may live in
another namespace than its Instance (``instanceRef.namespace``). The same rules as for instances hold: the
binding id is recorded before the request, one operation at a time, asynchronous binds polled and then
fetched, orphan mitigation (an unbind) after a bind whose outcome is unknown — one protocol, decided by
:mod:`.operations`; a failed unbind, like a failed deprovision, is recorded and sent again after a backoff.

Tenancy (``tenancy``): a Binding uses an Instance in another namespace only with the Instance's consent
(``spec.shareWith``) — without it nothing is sent to the broker (``ReferenceNotShared``), and consent withdrawn
from a bound Binding unbinds it. The binding and instance ids are derived or held (never read from a status);
a Binding that does not hold both sends nothing for them. The credentials Secret is created stamped with the
Binding's uid, and a live Secret without that stamp is never overwritten or deleted (``SecretNotOwned``).

The seed's pod injection by label selector is today's servicebinding.io workload projection: with
``spec.application`` (by name or label selector) the Secret is projected into the selected Deployments,
StatefulSets or DaemonSets of the binding's namespace exactly as for ServiceClaims (the same
:mod:`opbroker.controller.claims.workloads`), under a field manager of the binding's own, and withdrawn
on unbind. Workloads created or relabelled later are projected into when they appear.

observe reads the Binding, its Instance, the live credentials Secret and the workloads, the clock and the key's
pacing; every decision is :mod:`.core.binding_plan`'s (pure); act only runs its actions through the one
executor — the OSB calls, the Secret and the projection are effects that decide nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.controller.budgets import Budgeting
from opbroker.controller.claims import workloads
from opbroker.controller.claims.core.views import ObjectView, WorkloadView
from opbroker.controller.core import refusals
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.shown_failures import explain, refused_trouble
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.executor import Effect, Executor, Run, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.kube import Kube, Refused
from opbroker.controller.runtime.memory import Memories
from opbroker.controller.runtime.outcomes import Outcome
from opbroker.controller.runtime.policies import DEFAULTS, Policies
from opbroker.controller.runtime.showing import ShowsFailuresOnObject
from opbroker.controller.servicecatalog import effects
from opbroker.controller.servicecatalog.common import Clients, Resolver, pacing
from opbroker.controller.servicecatalog.core import binding_plan, tenancy
from opbroker.controller.servicecatalog.core.binding_plan import (
    SECRET_TYPE,
    BindingFacts,
    Project,
    ReleaseCredentials,
    Step,
    StoreCredentials,
    Stored,
    application_of,
    field_manager,
    instance_ref,
    next_step,
    projection_drift,
    secret_name,
    unstorable_keys,
)
from opbroker.controller.servicecatalog.core.offering import Unresolved
from opbroker.controller.servicecatalog.core.views import CatalogObject
from opbroker.controller.servicecatalog.resources import BINDINGS, INSTANCES, KINDS, CatalogApi
from opbroker.kubeclient.wire import mapping_of, string_map_of

__all__ = [
    "SECRET_TYPE",
    "BindingFacts",
    "BindingReconciler",
    "Step",
    "application_of",
    "field_manager",
    "instance_ref",
    "next_step",
    "projection_drift",
    "secret_name",
    "unstorable_keys",
]


class BindingReconciler(ShowsFailuresOnObject, ObservePlanAct[BindingFacts, Any]):
    kind: ClassVar[str] = "scbinding"

    def __init__(
        self,
        api: CatalogApi,
        memories: Memories,
        *,
        control_plane: str = DEFAULT_NAMESPACE,
        max_operation_seconds: float = 3600.0,
        writer: Callable[[str], Kube] | None = None,
        clock: Clock = SYSTEM,
        budgets: Budgeting | None = None,
        policies: Policies = DEFAULTS,
    ) -> None:
        """``writer``: the door writes into a namespace go through (that namespace's ``opbroker`` account, see
        ``controller.identities``); default the controller's own (single-tenant). ``clock``: the runtime's."""
        self.api = api
        self.budgets = budgets if budgets is not None else Budgeting()
        """The namespace budgets a new operation is checked against (``controller.budgets``)."""
        self.writer: Callable[[str], Kube] = writer or (lambda namespace: api.kube)
        self.resolver = Resolver(api, control_plane)
        self.clock = clock
        self.policies = policies
        """The timing table: its ``broker_polls`` (given up after ``max_operation_seconds``), ``broker_retries``
        and the draws jittering them."""
        self.polls = dataclasses.replace(policies.broker_polls, max_duration=max_operation_seconds)
        self.paces = effects.Paces(memories)
        self.transport: Any = None
        self.clients = Clients()
        target = Target(api.kube, KINDS[BINDINGS], self.kind)
        own: dict[type, Effect] = {
            StoreCredentials: self._store,
            ReleaseCredentials: self._release,
            Project: self._project,
        }
        self.executor = Executor(target, {**effects.effects(self.clients, lambda: self.transport, self.paces), **own})

    def observe(self, key: Key) -> BindingFacts | None:
        body = self.api.get(BINDINGS, key.namespace, key.name)
        if body is None:
            return None
        binding = CatalogObject.of(body)
        namespace, name = binding.instance_ref
        instance = self.api.get(INSTANCES, namespace, name)
        target = None if instance is None else CatalogObject.of(instance)
        consented = target is not None and tenancy.shared_with(target, key.namespace)
        problem = self._reference_problem(binding, consented)
        owns_ids = self._holds(binding, BINDINGS) and (target is None or self._holds(target, INSTANCES))
        invalid = tenancy.id_problem(binding)
        invalid_target = None if target is None else tenancy.id_problem(target)
        if problem is None and (invalid or invalid_target):
            problem = Unresolved(
                Reason.INVALID_EXTERNAL_ID,
                f"{'the binding' if invalid else 'its instance'}'s externalID: {invalid or invalid_target}; nothing is "
                "sent for it (and the Binding is deleted without an unbind): create it again with a valid externalID, "
                "or none",
            )
        elif problem is None and not owns_ids:
            problem = Unresolved(
                Reason.EXTERNAL_ID_IN_USE,
                "the binding's externalID, or its instance's, is held by another object: nothing is sent for it (and "
                "the Binding is deleted without an unbind); create the Binding again with another externalID, or none",
            )
        live = None
        if problem is None and not binding.meta.deleting:
            live = self.api.read_secret(key.namespace, binding.secret_name)
            if not tenancy.may_write_secret(live, binding.meta.uid):
                problem = Unresolved(
                    Reason.SECRET_NOT_OWNED,
                    f"Secret {binding.secret_name!r} exists and was not made by this Binding (it lacks the Binding's "
                    "opbroker.io/owner-uid): it is neither overwritten nor deleted; delete it, or create the Binding "
                    "again with another secretName",
                )
        offering = parameters = None
        if target is not None:  # also without consent: withdrawn consent unbinds what was bound
            try:
                held = target.status.held_plan
                offering = self.resolver.offering(target.instance_spec, held.name or None, held)
                if problem is None:
                    spec = binding.binding_spec
                    parameters = self.resolver.parameters(key.namespace, spec.parameters, spec.parameters_from)
                    if not target.status.provisioned or target.status.async_op:
                        raise Unresolved(
                            Reason.ERROR_INSTANCE_NOT_READY,
                            f"instance {namespace}/{name} is not ready (provisioned, idle) yet",
                        )
            except Unresolved as exc:
                problem = problem or exc
        application = application_of(binding)
        listed: tuple[WorkloadView, ...] = ()
        if application is not None or binding.status.projection_hash:
            kinds = {(application.api_version, application.kind)} if application else set(workloads.SUPPORTED_KINDS)
            listed = tuple(
                WorkloadView.of(w)
                for api_version, kind in sorted(kinds)
                for w in self.api.kube.list_objects(api_version, kind, key.namespace)
            )
        return BindingFacts(
            key,
            body,
            instance,
            offering,
            parameters,
            problem,
            listed,
            consented,
            owns_ids,
            secret_data=string_map_of((live or {}).get("data")),
            pacing=self.paces.of(key),
            now=self.clock.now(),
            monotonic=self.clock.monotonic(),
            polls=pacing(self.polls, offering),
            retries=self.policies.broker_retries,
            rechecks=self.policies.unresolved_recheck,
            draw=self.policies.draw(),
            over_budget=self.budgets.refusal(key),
        )

    @staticmethod
    def _reference_problem(binding: CatalogObject, consented: bool) -> Unresolved | None:
        """Why the Binding may not use its Instance, if it may not. An Instance in another namespace that is
        missing reads the same as one not shared: a Binding learns nothing of other namespaces."""
        if consented:
            return None
        namespace, name = binding.instance_ref
        own = binding.meta.namespace
        if namespace == own:
            return Unresolved(Reason.REFERENCES_NON_EXISTENT_INSTANCE, f"instance {namespace}/{name} does not exist")
        return Unresolved(
            Reason.REFERENCE_NOT_SHARED,
            f"instance {namespace}/{name} is not shared with namespace {own!r} (or does not exist): its owner must "
            f"list {own!r} (or '*') in the Instance's spec.shareWith; nothing is sent to the broker until then",
        )

    def _holds(self, obj: CatalogObject, plural: str) -> bool:
        """Whether ``obj`` holds its OSB id (a chosen id is checked against every object of its kind)."""
        return not tenancy.chosen(obj) or tenancy.holds_external_id(obj, map(CatalogObject.of, self.api.list(plural)))

    @staticmethod
    def plan(facts: BindingFacts) -> Sequence[Any]:
        return binding_plan.plan(facts)

    def reread(self, key: Key) -> None:
        """A guarded write met a conflict: the next observe reads the object from the API."""
        self.api.forget(BINDINGS, key.namespace, key.name)

    def act(self, facts: BindingFacts, actions: Sequence[Any]) -> Outcome:
        return self.executor.run(facts.key, facts.body, actions)

    # -- the Binding's effects (they decide nothing: the plan's ``stored`` decides on the outcome) -------------

    def _store(self, run: Run, action: StoreCredentials) -> None:
        """Write the credentials Secret — created stamped with the Binding's uid, or overwritten when the live
        one carries that stamp (guarded by the version read); the outcome to the plan. A permanent refusal of
        the API server is handed over masked; a transient one fails the reconcile (retried)."""
        manifest, namespace, name = action.manifest, action.namespace, action.name
        door = self.writer(namespace)  # writes as the namespace's account; reads are the controller's
        outcome: str
        live = self.api.read_secret(namespace, name)
        try:
            if not tenancy.may_write_secret(live, action.owner_uid):
                outcome = Stored.NOT_OURS
            elif live is None:
                outcome = Stored.WRITTEN if door.create(dict(manifest)) is not None else Stored.NOT_OURS
            else:
                version = ObjectView.of(live).meta.resource_version
                guarded = {**manifest, "metadata": {**mapping_of(manifest.get("metadata")), "resourceVersion": version}}
                door.apply_secret(guarded)  # a change meanwhile: 409
                outcome = Stored.WRITTEN
        except ApiException as exc:
            if refusals.severity(exc.status) is not refusals.Severity.PERMANENT:
                raise
            if isinstance(exc, Refused):  # the door masked it already (its body is gone)
                found = exc.refusal
            else:
                shown = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": manifest.get("data")}
                found = refusals.refusal(exc.status, exc.body, shown)
            outcome = explain(refused_trouble(found)).message  # what the API server said, after the fix it calls for
        if action.then is not None:
            for follow in action.then(outcome, run.body):
                run.perform(follow)

    def _release(self, run: Run, action: ReleaseCredentials) -> None:
        """Delete the credentials Secret if the live one carries the Binding's stamp, else leave it."""
        live = self.api.read_secret(action.namespace, action.name)
        if live is not None and tenancy.may_write_secret(live, action.owner_uid):
            self.writer(action.namespace).delete_secret(action.namespace, action.name, uid=ObjectView.of(live).meta.uid)

    def _project(self, run: Run, action: Project) -> None:
        door = self.writer(action.namespace)
        for patch in action.patches:
            door.apply(dict(patch), field_manager=action.field_manager)
