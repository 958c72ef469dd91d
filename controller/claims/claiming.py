"""Reconciling ServiceClaims: match, take exclusively, bind, project; release exactly what is held.

One reconcile:

1. a claim being deleted is *released* (finalizer): the service whose ``status.claimedBy`` names the
   claim is freed — found by that explicit reference, never by re-matching — its projection is removed
   from the workloads, the binding Secret deleted, then the finalizer;
2. the claim is matched against the registered services it may see — its namespace's, and those of the
   namespaces it names in ``serviceNamespaces`` that share with it (:mod:`matching`, every candidate judged
   and recorded in ``status.candidates``); a service it held that no longer wins (deleted, changed, no
   longer shared, or the claim changed) is released first;
3. the chosen service is *taken*: ``claimedBy`` and ``state: Claimed`` are written to its status with
   the resourceVersion the match saw, so of two claims racing for it exactly one succeeds — the other
   gets a 409 and matches again;
4. the binding Secret (:mod:`servicebinding`) is rendered from the service's current endpoint values (its
   Secrets read in the service's own namespace) and written in the claim's namespace, stamped with the
   claim's uid (``opbroker.io/owner-uid``); a Secret of that name without the stamp is never written or
   deleted (Ready=False, ``ObjectNotOwned``). It is projected into the selected workloads of the claim's namespace
   (:mod:`workloads`) with a content hash in the pod template, so a changed source Secret or endpoint
   definition rolls the pods;
5. the claim's status says Resolved (holding ``status.registeredService``), Pending (with the reasons;
   ``ReferenceNotShared`` when a namespace it names shares nothing with it), or Invalid.

observe reads the claim, the services it holds or will hold, the endpoint Secrets, the binding Secret and
the namespace's workloads, as typed views (:mod:`.core.views`); :func:`.core.claim_plan.plan` (pure) decides
all of the above; act hands the actions to the one executor (:mod:`opbroker.controller.runtime.executor`): the
claims finalizer, the status and its Events are its generic actions, and the claim's own (take, release, the
binding Secret, the projections, match again) are the effects below, which decide nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

from opbroker.controller.claims import servicebinding, workloads
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.core import claim_plan, matching, names
from opbroker.controller.claims.core.claim_plan import ClaimAction, ClaimFacts
from opbroker.controller.claims.core.views import ClaimView, ObjectView, ServiceView, WorkloadView
from opbroker.controller.claims.kinds import CLAIMS, REGISTERED_SERVICES
from opbroker.controller.core.reasons import Reason
from opbroker.controller.runtime.executor import Executor, Run, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.outcomes import Conflict, Outcome
from opbroker.controller.runtime.showing import ShowsFailuresOnObject
from opbroker.kubeclient.wire import JsonBody, JsonObject

logger = logging.getLogger(__name__)


class ClaimReconciler(ShowsFailuresOnObject, ObservePlanAct[ClaimFacts, ClaimAction]):
    kind: ClassVar[str] = "claim"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.executor = executor(ctx)

    # -- observe -------------------------------------------------------------------------------------

    def observe(self, key: Key) -> ClaimFacts | None:
        kube, store = self.ctx.kube, self.ctx.store
        _, namespace, name = key
        body = kube.get_custom(CLAIMS, namespace, name)
        if body is None:
            return None
        claim = ClaimView.of(body)
        recorded = claim.registered_service
        looks_in = claim.service_namespaces
        index = self._index(namespace, looks_in)
        # Holds are looked for where the claim looks, and where its status says it holds one (a namespace
        # it no longer names): a claimedBy elsewhere is another namespace's word, not this claim's business.
        places = {namespace, *looks_in}
        if recorded:
            places.add(names.parse_ref(recorded, home=namespace)[0])
        holding = tuple(
            sorted(
                names.qualified(ns, c.name, home=namespace)
                for ns in places
                for c in store.services(ns)
                if c.claimed_by == names.qualified(namespace, name, home=ns)
            )
        )
        wanted = set(holding)
        if recorded:
            wanted.add(recorded)
        chosen = claim_plan.predicted(claim, index, self.ctx.settings)
        if chosen is not None:
            wanted.add(chosen)
        services: dict[str, ServiceView | None] = {}
        for service in sorted(wanted):
            read = kube.get_custom(REGISTERED_SERVICES, *names.parse_ref(service, home=namespace))
            services[service] = None if read is None else ServiceView.of(read)
        secrets: dict[str, dict[str, str] | None] = {}
        chosen_view = services.get(chosen) if chosen is not None else None
        if chosen_view is not None:
            # The endpoint Secrets are read in the service's own namespace, never the claim's.
            home = chosen_view.meta.namespace
            definition = claim_plan.service_model(chosen_view).spec.service_endpoint_definition
            secrets = {
                secret: servicebinding.decode(kube.read_secret(home, secret))
                for secret in sorted(servicebinding.referenced_secrets(definition))
            }
        listed = tuple(
            WorkloadView.of(workload)
            for api_version, kind in workloads.SUPPORTED_KINDS
            for workload in kube.list_objects(api_version, kind, namespace)
        )
        binding_secret = kube.read_secret(namespace, names.binding_secret_name(name))
        return ClaimFacts(
            claim=claim,
            settings=self.ctx.settings,
            index=index,
            holding=holding,
            services=services,
            secrets=secrets,
            binding_secret=ObjectView.maybe(binding_secret),
            binding_data=servicebinding.decode(binding_secret),
            workloads=listed,
            now=self.ctx.clock.now(),
        )

    def _index(self, namespace: str, looks_in: Sequence[str]) -> matching.Index:
        """The namespace's services, plus those the named namespaces share with it (the match judges only
        what the claim may see; nothing unshared is read here)."""
        store = self.ctx.store
        others = [n for n in looks_in if n != namespace]
        if not others:
            return store.index(namespace)
        shared = [
            c for other in others for c in store.services(other) if matching.shared_with(namespace, other, c.share_with)
        ]
        return matching.Index([*store.services(namespace), *shared])

    # -- plan (pure: .core.claim_plan) and act (the executor) -----------------------------------------

    @staticmethod
    def plan(facts: ClaimFacts) -> Sequence[ClaimAction]:
        return claim_plan.plan(facts)

    def act(self, facts: ClaimFacts, actions: Sequence[ClaimAction]) -> Outcome:
        meta = facts.claim.meta
        key = Key(self.kind, meta.namespace, meta.name)
        return self.executor.run(key, facts.claim.wire, actions, lambda refusal: claim_plan.refused(facts, refusal))


# -- the claim's own effects: each performs its action, none decides ---------------------------------------


def executor(ctx: Context) -> Executor:
    """The one executor, for ServiceClaims: the claims finalizer, and the claim's own actions as effects."""

    def release(run: Run, action: claim_plan.Release) -> None:
        released = _write_service_status(
            run, ctx, action.namespace, action.service, action.resource_version, action.patch
        )
        if released is not None:
            ctx.kube.emit_event(released, reason=Reason.RELEASED.value, message=action.message)

    def take(run: Run, action: claim_plan.Take) -> None:
        namespace = action.namespace or run.key.namespace
        taken = _write_service_status(run, ctx, namespace, action.service, action.resource_version, action.patch)
        if taken is None:
            raise Conflict(action.service)  # deleted since the match: match again
        ctx.kube.emit_event(taken, reason=Reason.CLAIMED.value, message=action.message)

    def rematch(run: Run, action: claim_plan.Rematch) -> None:
        raise Conflict(action.service)

    def delete_secret(run: Run, action: claim_plan.DeleteSecret) -> None:
        namespace = run.key.namespace
        ctx.door(namespace).delete_secret(namespace, action.name, uid=action.uid)

    def apply_secret(run: Run, action: claim_plan.ApplySecret) -> None:
        ctx.write_secret(dict(action.manifest), action.resource_version)

    def apply_workloads(run: Run, action: claim_plan.ApplyWorkloads) -> None:
        door, manager = ctx.door(run.key.namespace), names.field_manager(run.key.name)
        for patch in action.patches:
            door.apply(dict(patch), field_manager=manager)

    target = Target(ctx.kube, CLAIMS, ClaimReconciler.kind)
    return Executor(
        target,
        {
            claim_plan.Release: release,
            claim_plan.Take: take,
            claim_plan.Rematch: rematch,
            claim_plan.DeleteSecret: delete_secret,
            claim_plan.ApplySecret: apply_secret,
            claim_plan.ApplyWorkloads: apply_workloads,
        },
    )


def _write_service_status(
    run: Run, ctx: Context, namespace: str, name: str, version: str | None, patch: JsonObject
) -> JsonBody | None:
    """Merge ``patch`` into a RegisteredService's status guarded by ``version`` (409: a Conflict)."""
    return run.guarded(
        lambda: ctx.kube.patch_custom_status(
            REGISTERED_SERVICES, namespace, name, dict(patch), resource_version=version
        )
    )
