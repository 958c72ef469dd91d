"""Reconciling an Instance: provision, update and deprovision it through its broker, one operation at a time.

observe resolves the class, plan and broker and merges the parameters; plan (:func:`next_step`, pure) picks
the one step due from the status; act makes the OSB call and records its outcome. The OSB operation
protocol — recording, polling, deadline, orphan mitigation, refusals — is decided by :mod:`.operations`,
shared with Bindings; this module keeps the calls and what an outcome means for an Instance. The rules, from
the Service Catalog design and the OSB spec:

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
  else's) fails with ``ExternalIDInUse`` and is deleted without a deprovision.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from opbroker import osbclient
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.servicecatalog import DeprovisionStatus, InstanceOperation, ProvisionStatus
from opbroker.controller.core.reasons import Reason
from opbroker.controller.reconciler import DONE, Key, Memories, ObservePlanAct, Outcome, requeue
from opbroker.controller.servicecatalog.bindingrefs import BindingRef
from opbroker.controller.servicecatalog.common import (
    Clients,
    Offering,
    Resolver,
    Tracking,
    Unresolved,
    checksum,
    conditions,
    mitigation_follows,
    now,
    pacing,
    parse_time,
    removal_failed,
    removed,
    say,
    timestamp,
    warn_ignored,
)
from opbroker.controller.servicecatalog.core import admission, operations, tenancy
from opbroker.controller.servicecatalog.core.endpoints import identity_of
from opbroker.controller.servicecatalog.core.operations import Verdict, keeping_failed, terminal_mitigation
from opbroker.controller.servicecatalog.resources import BINDINGS, FINALIZER, INSTANCES, CatalogApi
from opbroker.osbclient import Request

logger = logging.getLogger(__name__)

#: The OSB request each operation sends.
REQUESTS = {
    InstanceOperation.PROVISION: Request.PROVISION,
    InstanceOperation.UPDATE: Request.UPDATE,
    InstanceOperation.DEPROVISION: Request.DEPROVISION,
}


class Step(StrEnum):
    NOTHING = "nothing"
    ADD_FINALIZER = "add-finalizer"
    REMOVE_FINALIZER = "remove-finalizer"
    BLOCKED = "blocked"
    UNRESOLVED = "unresolved"
    PROVISION = "provision"
    UPDATE = "update"
    SETTLE = "settle"
    """A spec change that asks the broker for nothing (only ``shareWith`` moved): recorded as observed."""
    DEPROVISION = "deprovision"
    POLL = "poll"
    MITIGATE = "mitigate"


@dataclass(frozen=True)
class InstanceFacts:
    key: Key
    body: dict[str, Any]
    offering: Offering | None
    parameters: dict[str, Any] | None
    problem: Unresolved | None
    bindings: tuple[str, ...]
    """``namespace/name`` of the Bindings referring to it (read only while it is being deleted)."""
    owns_id: bool = True
    """Whether it holds its instance id (``tenancy.holds_external_id``); when not, ``problem`` says why."""
    desired: dict[str, Any] | None = None
    """What the broker should have the instance as (:func:`properties`); None when not resolved."""


#: The properties whose change is sent to the broker as an update (``updateRequests`` is 0 when unrecorded).
UPDATED_BY = ("planExternalID", "parametersChecksum", "updateRequests")


def properties(offering: Offering, parameters: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """The plan, parameters checksum and ``updateRequests`` an operation asks the broker for."""
    return {
        "planName": offering.plan["name"],
        "planExternalID": offering.plan_id,
        "parametersChecksum": checksum(parameters),
        "updateRequests": int(spec.get("updateRequests") or 0),
    }


def needs_update(held: dict[str, Any] | None, desired: dict[str, Any] | None) -> bool:
    """Whether a provisioned instance whose spec changed asks the broker for anything: another plan, other
    parameters, or a bumped ``updateRequests``. A change of anything else — whom it is shared with — is not an
    OSB update."""
    if desired is None:
        return True
    held = held or {}
    return any(held.get(key, 0 if key == "updateRequests" else None) != desired.get(key) for key in UPDATED_BY)


def next_step(facts: InstanceFacts) -> Step:
    body = facts.body
    meta, status = body["metadata"], body.get("status") or {}
    deleting = bool(meta.get("deletionTimestamp"))
    held = FINALIZER in (meta.get("finalizers") or [])
    if not held:
        return Step.NOTHING if deleting else Step.ADD_FINALIZER
    if not facts.owns_id:
        # Someone else's id: nothing is ever sent for it, whatever the status (its owner can write it) says.
        return Step.REMOVE_FINALIZER if deleting else Step.UNRESOLVED
    if status.get("asyncOpInProgress"):
        return Step.POLL  # one operation at a time, a deletion included
    if status.get("orphanMitigationInProgress"):
        return Step.MITIGATE
    if deleting:
        if facts.bindings:
            return Step.BLOCKED
        if status.get("deprovisionStatus") in (DeprovisionStatus.REQUIRED.value, DeprovisionStatus.FAILED.value):
            return Step.DEPROVISION if facts.offering is not None else Step.UNRESOLVED
        return Step.REMOVE_FINALIZER
    if facts.problem is not None:
        return Step.UNRESOLVED
    if status.get("observedGeneration") == meta.get("generation"):
        return Step.NOTHING  # settled, or failed and waiting for a spec change
    if status.get("provisionStatus") == ProvisionStatus.PROVISIONED.value:
        return Step.UPDATE if needs_update(status.get("externalProperties"), facts.desired) else Step.SETTLE
    return Step.PROVISION


class InstanceReconciler(ObservePlanAct[InstanceFacts, Step]):
    kind: ClassVar[str] = "scinstance"

    def __init__(
        self,
        api: CatalogApi,
        memories: Memories,
        *,
        control_plane: str = DEFAULT_NAMESPACE,
        max_operation_seconds: float = 3600.0,
    ) -> None:
        self.api = api
        self.resolver = Resolver(api, control_plane)
        self.tracking = Tracking(
            memories, osbclient.Backoff(base=1.0, maximum=30.0, max_duration=max_operation_seconds)
        )
        self.transport: Any = None
        self.clients = Clients()

    # -- observe / plan / act ------------------------------------------------------------------------------

    def observe(self, key: Key) -> InstanceFacts | None:
        body = self.api.get(INSTANCES, key.namespace, key.name)
        if body is None:
            return None
        spec = body.get("spec") or {}
        deleting = bool(body["metadata"].get("deletionTimestamp"))
        offering = parameters = problem = None
        try:
            status = body.get("status") or {}
            # The plan the broker has the instance on (or is being asked for, mid-operation).
            held = status.get("externalProperties") or status.get("inProgressProperties") or {}
            plan_name = held.get("planName") if deleting else None
            offering = self.resolver.offering(spec, plan_name, held)
            parameters = None if deleting else self.resolver.parameters(key.namespace, spec)
            if (
                not deleting
                and removed(offering.service_class)
                and status.get("provisionStatus") != ProvisionStatus.PROVISIONED.value
            ):
                raise Unresolved(
                    Reason.REFERENCES_REMOVED_CLASS,
                    f"service class {offering.service_class['metadata']['name']!r} was removed from broker "
                    f"{offering.service_class.get('brokerName')!r}'s catalog: no new instance can be provisioned "
                    "from it (existing ones keep working)",
                )
        except Unresolved as exc:
            problem = exc
        owns_id = not tenancy.chosen(body) or tenancy.holds_external_id(body, self.api.list(INSTANCES))
        if not owns_id:
            problem = Unresolved(
                Reason.EXTERNAL_ID_IN_USE,
                f"externalID {tenancy.external_id(body)!r} is held by another Instance: this one sends nothing for "
                "it (and is deleted without a deprovision); create the Instance again with another externalID, or none",
            )
        bindings = self._bindings(body) if deleting else ()
        desired = properties(offering, parameters, spec) if offering is not None and parameters is not None else None
        return InstanceFacts(key, body, offering, parameters, problem, bindings, owns_id, desired)

    @staticmethod
    def plan(facts: InstanceFacts) -> Sequence[Step]:
        step = next_step(facts)
        return () if step is Step.NOTHING else (step,)

    def act(self, facts: InstanceFacts, actions: Sequence[Step]) -> Outcome:
        outcome = DONE
        for step in actions:
            outcome = self._do(step, facts)
        return outcome

    def _do(self, step: Step, facts: InstanceFacts) -> Outcome:
        body = facts.body
        if step is Step.ADD_FINALIZER:
            self.api.set_finalizer(INSTANCES, body, present=True)
            return requeue(0)
        if step is Step.REMOVE_FINALIZER:
            self.api.set_finalizer(INSTANCES, body, present=False)
            return DONE
        if step is Step.SETTLE:
            self.api.patch_status(INSTANCES, body, {"observedGeneration": body["metadata"].get("generation")})
            return DONE
        if step is Step.BLOCKED:
            names = ", ".join(facts.bindings)
            message = (
                f"deletion waits: {len(facts.bindings)} binding(s) still use this instance ({names}); delete them first"
            )
            self._status(body, ready=False, reason=Reason.INSTANCE_DELETE_BLOCKED, message=message)
            return DONE  # a binding's deletion queues the instance again
        if step is Step.UNRESOLVED:
            assert facts.problem is not None
            self._status(body, ready=False, reason=facts.problem.reason, message=str(facts.problem))
            return requeue(30.0)  # a class or Secret appearing also queues it
        assert facts.offering is not None
        if step is Step.POLL and (early := self.tracking.early(facts.key)) is not None:
            return early  # woken early (an event, an older re-check): not due yet
        client = self.clients.get(facts.offering.broker, self.transport)
        if step is Step.POLL:
            return self._poll(client, facts)
        if step is Step.MITIGATE or step is Step.DEPROVISION:
            return self._deprovision(client, facts, mitigation=step is Step.MITIGATE)
        return self._provision_or_update(client, facts, update=step is Step.UPDATE)

    # -- the operations (the protocol's decisions are ``operations``'; here only the calls) -------------------

    def _provision_or_update(self, client: osbclient.Client, facts: InstanceFacts, *, update: bool) -> Outcome:
        body, offering = facts.body, facts.offering
        assert offering is not None and facts.parameters is not None
        status = body.get("status") or {}
        external_id = tenancy.external_id(body)
        operation = InstanceOperation.UPDATE if update else InstanceOperation.PROVISION
        reason = Reason.UPDATING if update else Reason.PROVISIONING
        what = operation.value.lower()
        # Record first, send second: a crash in between repeats the request with the same id.
        self.api.patch_status(
            INSTANCES,
            body,
            operations.recorded(
                operation.value,
                timestamp(now()),
                externalID=external_id,
                inProgressProperties=properties(offering, facts.parameters, body["spec"]),
                **({} if update else {"deprovisionStatus": DeprovisionStatus.REQUIRED.value}),
                conditions=conditions(body, ready=update, reason=reason, message=f"{what} requested"),
            ),
        )
        try:
            if update:
                external_plan = (status.get("externalProperties") or {}).get("planExternalID")
                result = client.update(
                    external_id,
                    service_id=offering.service_id,
                    plan_id=offering.plan_id if offering.plan_id != external_plan else None,
                    parameters=facts.parameters,
                    context=self._context(body),
                    identity=identity_of(body),
                )
            else:
                result = client.provision(
                    external_id,
                    service_id=offering.service_id,
                    plan_id=offering.plan_id,
                    organization_guid=body["metadata"].get("namespace", ""),
                    space_guid=body["metadata"].get("namespace", ""),
                    parameters=facts.parameters,
                    context=self._context(body),
                    identity=identity_of(body),
                )
        except osbclient.BrokerError as exc:
            return self._decided(facts, operation, operations.refused(REQUESTS[operation], exc))
        warn_ignored(self.api, body, result.warnings, what)
        if result.is_async:
            working = f"the broker is working on the {what}"
            self.api.patch_status(
                INSTANCES,
                body,
                {
                    **operations.accepted(result.operation),
                    "conditions": conditions(body, ready=update, reason=reason, message=working),
                },
            )
            return self.tracking.accepted(facts.key)
        return self._succeeded(facts, operation, dashboard_url=result.dashboard_url)

    def _poll(self, client: osbclient.Client, facts: InstanceFacts) -> Outcome:
        body, offering = facts.body, facts.offering
        assert offering is not None
        status = body.get("status") or {}
        operation = InstanceOperation(status.get("currentOperation") or InstanceOperation.PROVISION.value)
        answer: osbclient.LastOperation | osbclient.BrokerError
        try:
            answer = client.last_operation(
                tenancy.external_id(body),
                operation=status.get("lastOperation"),
                service_id=offering.service_id,
                plan_id=offering.plan_id,
            )
        except osbclient.BrokerError as exc:
            answer = exc
        decision = operations.polled(
            REQUESTS[operation],
            answer,
            started=parse_time(status.get("operationStartTime")),
            now=now(),
            polls=self.tracking.poll(facts.key),
            backoff=pacing(self.tracking.pacing, offering),
        )
        return self._decided(facts, operation, decision)

    def _deprovision(self, client: osbclient.Client, facts: InstanceFacts, *, mitigation: bool) -> Outcome:
        body, offering = facts.body, facts.offering
        assert offering is not None
        self.api.patch_status(
            INSTANCES,
            body,
            operations.recorded(
                InstanceOperation.DEPROVISION.value,
                timestamp(now()),
                conditions=keeping_failed(
                    body,
                    conditions(
                        body,
                        ready=False,
                        reason=Reason.ORPHAN_MITIGATION if mitigation else Reason.DEPROVISIONING,
                        message="orphan mitigation: deprovisioning" if mitigation else "deprovisioning",
                    ),
                    keep=mitigation and terminal_mitigation(body),
                ),
            ),
        )
        try:
            result = client.deprovision(
                tenancy.external_id(body),
                service_id=offering.service_id,
                plan_id=offering.plan_id,
                identity=identity_of(body),
            )
        except osbclient.BrokerError as exc:
            return self._decided(facts, InstanceOperation.DEPROVISION, operations.refused(Request.DEPROVISION, exc))
        if result.is_async:
            self.api.patch_status(INSTANCES, body, operations.accepted(result.operation))
            return self.tracking.accepted(facts.key)
        return self._deprovisioned(facts)

    # -- outcomes ----------------------------------------------------------------------------------------------

    def _decided(self, facts: InstanceFacts, operation: InstanceOperation, decision: operations.Decision) -> Outcome:
        if decision.verdict is Verdict.POLL:
            return self.tracking.schedule(facts.key, decision.delay)
        if decision.verdict is Verdict.SUCCEEDED:
            if operation is InstanceOperation.DEPROVISION:
                return self._deprovisioned(facts)
            return self._succeeded(facts, operation, dashboard_url=None)
        if decision.verdict is Verdict.RETRY:
            self._status(
                facts.body, ready=False, reason=_failure_reason(operation), message=f"{decision.message}; retrying"
            )
            return self.tracking.retry(facts.key)
        return self._operation_failed(facts, operation, decision)

    def _succeeded(self, facts: InstanceFacts, operation: InstanceOperation, *, dashboard_url: str | None) -> Outcome:
        body = facts.body
        status = body.get("status") or {}
        self.tracking.succeeded(facts.key)
        message = "provisioned" if operation is InstanceOperation.PROVISION else "updated"
        reason = Reason.PROVISIONED if operation is InstanceOperation.PROVISION else Reason.INSTANCE_UPDATED
        self.api.patch_status(
            INSTANCES,
            body,
            operations.finished(
                body,
                provisionStatus=ProvisionStatus.PROVISIONED.value,
                deprovisionStatus=DeprovisionStatus.REQUIRED.value,
                externalProperties=status.get("inProgressProperties"),
                **({"dashboardURL": dashboard_url} if dashboard_url else {}),
                conditions=conditions(body, ready=True, reason=reason, message=f"the broker {message} the instance"),
            ),
        )
        self.api.kube.emit_event(body, reason=reason.value, message=f"the broker {message} the instance")
        return DONE

    def _deprovisioned(self, facts: InstanceFacts) -> Outcome:
        body = facts.body
        status = body.get("status") or {}
        mitigation = bool(status.get("orphanMitigationInProgress"))
        final = mitigation and terminal_mitigation(body)
        after = "the instance stays failed until its spec changes" if final else "provisioning is retried"
        mitigated = conditions(
            body,
            ready=False,
            reason=Reason.ORPHAN_MITIGATION_SUCCESSFUL,
            message=f"orphan mitigation deprovisioned what the failed provision may have left; {after}",
        )
        self.api.patch_status(
            INSTANCES,
            body,
            operations.removed(
                provisionStatus=ProvisionStatus.NOT_PROVISIONED.value,
                deprovisionStatus=DeprovisionStatus.SUCCEEDED.value,
                **({"conditions": keeping_failed(body, mitigated, keep=final)} if mitigation else {}),
            ),
        )
        if body["metadata"].get("deletionTimestamp"):
            self.api.set_finalizer(INSTANCES, body, present=False)
            return DONE
        if final:
            return DONE  # failed for good: a spec change queues it again
        return self.tracking.retry(facts.key)  # mitigation done: provision again, after a pause

    def _operation_failed(
        self, facts: InstanceFacts, operation: InstanceOperation, decision: operations.Decision
    ) -> Outcome:
        body, message = facts.body, decision.message
        reason = Reason.ASYNC_OPERATION_TIMED_OUT if decision.timed_out else _failure_reason(operation)
        if decision.mitigate:
            return mitigation_follows(self.api, INSTANCES, body, reason=reason, message=message, final=decision.final)
        if operation is InstanceOperation.DEPROVISION:  # sent again, after a pause: a deletion has no spec to change
            removal_failed(self.api, INSTANCES, body, "deprovisionStatus", reason=reason, message=message)
            return self.tracking.retry(facts.key)
        extra: dict[str, Any] = {}
        provisioned = (body.get("status") or {}).get("provisionStatus") == ProvisionStatus.PROVISIONED.value
        if operation is InstanceOperation.PROVISION and not provisioned:
            reason, disown = tenancy.refusal(chosen_id=tenancy.chosen(body), status=decision.answered, failure=reason)
            if disown:  # the broker made nothing of ours under this id: deleting the Instance asks it nothing
                extra["deprovisionStatus"] = DeprovisionStatus.NOT_REQUIRED.value
            if reason is Reason.EXTERNAL_ID_IN_USE:
                message = (
                    f"{message}: the broker already has an instance {tenancy.external_id(body)!r}, which is not this "
                    "Instance's; it is never updated, bound or deprovisioned from here (create the Instance again "
                    "with another externalID, or none)"
                )
        failure = conditions(body, ready=provisioned, reason=reason, message=message, failed=True)
        self.api.patch_status(INSTANCES, body, operations.failed(body, conditions=failure, **extra))
        self.api.kube.emit_event(body, reason=reason.value, message=message, warning=True)
        return DONE

    # -- helpers -------------------------------------------------------------------------------------------------

    def _status(self, body: dict[str, Any], *, ready: bool, reason: Reason, message: str) -> None:
        say(self.api, INSTANCES, body, ready=ready, reason=reason, message=message)

    def _bindings(self, body: dict[str, Any]) -> tuple[str, ...]:
        return tuple(admission.bindings_of(body, (BindingRef.of(b) for b in self.api.list(BINDINGS))))

    @staticmethod
    def _context(body: dict[str, Any]) -> dict[str, Any]:
        meta = body["metadata"]
        return {"platform": "kubernetes", "namespace": meta["namespace"], "instance_name": meta["name"]}


def _failure_reason(operation: InstanceOperation) -> Reason:
    return {
        InstanceOperation.PROVISION: Reason.PROVISION_CALL_FAILED,
        InstanceOperation.UPDATE: Reason.UPDATE_CALL_FAILED,
        InstanceOperation.DEPROVISION: Reason.DEPROVISION_CALL_FAILED,
    }[operation]
