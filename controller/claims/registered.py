"""Reconciling RegisteredServices: endpoint values, health checks, the state, the holder.

Each reconcile reads the service, resolves its endpoint definition (a missing Secret or key makes it
Undetermined), accounts at most one new health-check result, and writes the state :mod:`states`
decides — guarded by the resourceVersion, so it never overwrites a claim taking the service meanwhile.
TCP/HTTP probes run in the :class:`~opbroker.controller.claims.probes.Prober`'s threads and come back
as a re-enqueue; a container check is a Job (:mod:`healthjobs`) whose deadline the reconcile enforces.
The next check is due one period after the last result; the reconcile asks the queue to come back then.

Tenancy: the endpoint Secrets are read in the service's own namespace only (``valueFromSecret`` names no
namespace), and a container check runs there, mounting a Secret made from those values; the check's Secret and
Job are stamped with the service's uid (``opbroker.io/owner-uid``) and one of those names without the stamp is
never written or deleted (Undetermined, ``ObjectNotOwned``). A holder of another namespace keeps the service only
while the service shares with it and the claim still looks here (:func:`matching.holder_allowed`).

observe reads the service, whether its holder exists (and may hold it), the endpoint Secrets, the check's
schedule and the prober's result (or the check's Job and Secret) and the clock;
:func:`.core.registered_plan.plan` (pure) decides the check to run, the schedule, the state and the status
write; act hands them to the one executor (the status, its Events and requeues are generic actions; the
schedule, the probe and the check's Job are the effects below, which decide nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from opbroker.controller.claims import servicebinding
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.core import matching, names, registered_plan
from opbroker.controller.claims.core.registered_plan import RegisteredAction, RegisteredFacts, Schedule, Started
from opbroker.controller.claims.core.views import JobView, ObjectView, ServiceView
from opbroker.controller.claims.kinds import CLAIMS, REGISTERED_SERVICES
from opbroker.controller.claims.store import claim_info
from opbroker.controller.runtime.executor import Executor, Run, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.outcomes import DONE, Outcome
from opbroker.controller.runtime.showing import ShowsFailuresOnObject
from opbroker.controller.runtime.troubles import shown_for

logger = logging.getLogger(__name__)


class RegisteredReconciler(ShowsFailuresOnObject, ObservePlanAct[RegisteredFacts, RegisteredAction]):
    kind: ClassVar[str] = "registered"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._schedules: dict[Key, Schedule] = {}
        self.executor = self._executor()

    def forget(self, key: Key) -> None:
        self._schedules.pop(key, None)
        self.ctx.prober.forget(key)

    def gone(self, key: Key) -> Outcome:
        self.forget(key)
        return DONE

    # -- observe -------------------------------------------------------------------------------------

    def observe(self, key: Key) -> RegisteredFacts | None:
        kube = self.ctx.kube
        _, namespace, name = key
        body = kube.get_custom(REGISTERED_SERVICES, namespace, name)
        if body is None:
            return None
        service = ServiceView.of(body)
        if service.meta.deleting:
            return None
        facts = RegisteredFacts(
            key, service, self.ctx.clock.monotonic(), self.ctx.clock.now(), self.ctx.settings.probe_timeout
        )
        try:
            model = registered_plan.service_model(service)
        except ValidationError:
            return facts
        holder = service.claimed_by
        definition = model.spec.service_endpoint_definition
        # Only the service's own namespace: Secrets are never read across namespaces.
        secrets = {
            secret: servicebinding.decode(kube.read_secret(namespace, secret))
            for secret in sorted(servicebinding.referenced_secrets(definition))
        }
        check = model.spec.healthcheck
        complete = servicebinding.resolve(definition, secrets).complete
        finished, running, job, check_secret = None, False, None, None
        if complete and check is not None and check.container is not None:
            job = JobView.maybe(kube.get(registered_plan.job_ref(service)))
            check_secret = ObjectView.maybe(kube.read_secret(namespace, names.healthcheck_name(name)))
        elif complete and check is not None:
            finished, running = self.ctx.prober.take(key), self.ctx.prober.running(key)
        return RegisteredFacts(
            key,
            service,
            facts.now,
            facts.wall,
            facts.probe_timeout,
            holder_exists=holder is not None and self._may_hold(namespace, holder, model.spec.share_with or ()),
            secrets=secrets,
            schedule=self._schedules.get(key),
            finished=finished,
            running=running,
            job=job,
            check_secret=check_secret,
        )

    def _may_hold(self, namespace: str, holder: str, share_with: Sequence[str]) -> bool:
        """Whether the claim named by ``claimedBy`` exists (cache first, then the API to be sure) and may hold
        the service: of another namespace, only while the service shares with it and the claim looks here."""
        claim_namespace, claim = names.parse_ref(holder, home=namespace)
        info = self.ctx.store.claim(claim_namespace, claim)
        if info is None:
            body = self.ctx.kube.get_custom(CLAIMS, claim_namespace, claim)
            if body is None:
                return False
            info = claim_info(body)
        return matching.holder_allowed(namespace, share_with, claim_namespace, info.service_namespaces)

    # -- plan (pure: .core.registered_plan) and act (the executor) ------------------------------------

    @staticmethod
    def plan(facts: RegisteredFacts) -> Sequence[RegisteredAction]:
        return registered_plan.plan(facts)

    def act(self, facts: RegisteredFacts, actions: Sequence[RegisteredAction]) -> Outcome:
        return self.executor.run(facts.key, facts.service.wire, actions)

    # -- the service's own effects: each performs its action, none decides ----------------------------

    def _executor(self) -> Executor:
        ctx, schedules = self.ctx, self._schedules

        def set_schedule(run: Run, action: registered_plan.SetSchedule) -> None:
            schedules[run.key] = action.schedule

        def drop_schedule(run: Run, action: registered_plan.DropSchedule) -> None:
            schedules.pop(run.key, None)

        def submit_probe(run: Run, action: registered_plan.SubmitProbe) -> None:
            ctx.prober.submit(run.key, action.fingerprint, action.probe)

        def delete_job(run: Run, action: registered_plan.DeleteJob) -> None:
            ctx.door(run.key.namespace).delete(registered_plan.job_ref(ServiceView.of(run.body)))

        def start_job(run: Run, action: registered_plan.StartJob) -> None:
            try:
                ctx.write_secret(dict(action.secret), action.secret_version)
                created = ctx.door(run.key.namespace).create(dict(action.job))
                started = Started.CREATED if created is not None else Started.STILL_DELETING
            except ApiException as exc:
                started = exc.status
                shown = shown_for(exc)  # the refusal's reason and fix (a namespace not onboarded: onboard it)
                follow = action.then(started, shown.message if shown else "", shown.reason if shown else None)
                if follow is None:
                    raise
            else:
                follow = action.then(started)
            for then in follow or ():
                run.perform(then)

        target = Target(ctx.kube, REGISTERED_SERVICES, self.kind, forget=self.forget)
        return Executor(
            target,
            {
                registered_plan.SetSchedule: set_schedule,
                registered_plan.DropSchedule: drop_schedule,
                registered_plan.SubmitProbe: submit_probe,
                registered_plan.DeleteJob: delete_job,
                registered_plan.StartJob: start_job,
            },
        )
