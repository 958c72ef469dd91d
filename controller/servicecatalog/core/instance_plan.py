"""An Instance's plan: every decision of provisioning, updating and deprovisioning it, pure.

:func:`plan` turns the facts (the Instance as read, what it refers to resolved, its pacing and the clock's
reading) into actions of the one vocabulary, the executor's generic ones (finalizer, status with its Event,
requeue) and :class:`~.calls.Call` for an OSB request. A call's answer is decided here too: the call carries
the function (:func:`answered`, :func:`polled`, :func:`removal_answered`) that makes the next actions of it —
the effect that sends it only hands the answer over. The protocol's own decisions (refusals, polls,
deadline, orphan mitigation) are :mod:`.operations`'; this module says what an outcome means for an Instance.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from functools import partial
from typing import Any

from opbroker import osbclient
from opbroker.api.servicecatalog import DeprovisionStatus, InstanceOperation, ProvisionStatus
from opbroker.controller.core import actions as a
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import Meta
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.controller.servicecatalog.core import calls, live, operations, tenancy
from opbroker.controller.servicecatalog.core.calls import Call, Pacing
from opbroker.controller.servicecatalog.core.endpoints import identity_of
from opbroker.controller.servicecatalog.core.offering import NO_OFFERING, Offering, Unresolved
from opbroker.controller.servicecatalog.core.operations import Verdict, keeping_failed, terminal_mitigation
from opbroker.controller.servicecatalog.core.statuses import (
    after_failure,
    checksum,
    conditions,
    ignored,
    mitigation_follows,
    parse_time,
    removal_failed,
    said,
    timestamp,
    unresolved,
    waiting_for_budget,
)
from opbroker.controller.servicecatalog.core.views import CatalogObject, InstanceSpec
from opbroker.kubeclient.wire import JsonBody, JsonObject
from opbroker.osbclient import Request

#: The OSB request each operation sends.
REQUESTS = {
    InstanceOperation.PROVISION: Request.PROVISION,
    InstanceOperation.UPDATE: Request.UPDATE,
    InstanceOperation.DEPROVISION: Request.DEPROVISION,
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
    WAIT_FOR_BUDGET = "wait-for-budget"
    """A provision or update its namespace's budget holds back (``controller.core.budgets``)."""


@dataclass(frozen=True)
class InstanceFacts:
    key: Key
    body: JsonObject = field(repr=False)
    offering: Offering | None
    parameters: JsonObject | None
    problem: Unresolved | None
    bindings: tuple[str, ...]
    """``namespace/name`` of the Bindings referring to it (read only while it is being deleted)."""
    owns_id: bool = True
    """Whether it holds its instance id (``tenancy.holds_external_id``); when not, ``problem`` says why."""
    desired: JsonObject | None = None
    """What the broker should have the instance as (:func:`properties`); None when not resolved."""
    pacing: Pacing = field(default_factory=Pacing)
    """What is remembered of its operation (polls, when the next is due, retries)."""
    now: datetime = _EPOCH
    """The wall clock's reading (timestamps, the operation's deadline)."""
    monotonic: float = 0.0
    """The monotonic clock's reading (when a poll is due)."""
    polls: osbclient.Backoff = DEFAULTS.broker_polls
    """The poll pacing, its deadline shortened to the plan's ``maximum_polling_duration`` (``operations.deadline``)."""
    retries: osbclient.Backoff = DEFAULTS.broker_retries
    """The backoff of a transient failure's retry (the policy table's ``broker_retries``)."""
    rechecks: osbclient.Backoff = DEFAULTS.unresolved_recheck
    """The look again at an Instance that cannot go on yet (unresolved, over its namespace's budget)."""
    draw: float = 0.0
    """A random draw in [0, 1) taken by the edge (the policy table's source), jittering the waits; 0: none."""
    over_budget: str | None = None
    """Why the namespace may start no new operation now (``controller.core.budgets.refusal``; None: it may)."""
    last_look: float | None = None
    """When it was last looked at at its broker, or first seen settled (monotonic; :mod:`.live`); None: not yet."""
    resync_seconds: float = 0.0
    """The resync period of a settled Instance's look at its broker (:mod:`.live`; 0: none)."""
    instance: CatalogObject = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "instance", CatalogObject.of(self.body))

    @property
    def recheck_in(self) -> float:
        """When to look again at an object that cannot go on yet: :attr:`rechecks`, jittered by :attr:`draw`."""
        return self.rechecks.delay(1, self.draw)


#: What a failure the same request would meet again says next: how to ask again once its cause is fixed (the
#: broker's 400 for a namespace it does not allow, a plan it refused), with no change of what is asked.
STAYS_FAILED = (
    "the instance stays failed until its spec changes: once the cause is fixed, increase spec.updateRequests to "
    "send the request again"
)
#: The properties whose change is sent to the broker as an update (``updateRequests`` is 0 when unrecorded).
UPDATED_BY = ("planExternalID", "parametersChecksum", "updateRequests")


def properties(offering: Offering, parameters: JsonObject, spec: InstanceSpec) -> JsonBody:
    """The plan, parameters checksum and ``updateRequests`` an operation asks the broker for (written into the
    status: a plain dict)."""
    return {
        "planName": offering.plan.name,
        "planExternalID": offering.plan_id,
        "parametersChecksum": checksum(parameters),
        "updateRequests": spec.update_requests,
    }


def needs_update(held: JsonObject | None, desired: JsonObject | None) -> bool:
    """Whether a provisioned instance whose spec changed asks the broker for anything: another plan, other
    parameters, or a bumped ``updateRequests``. A change of anything else — whom it is shared with — is not an
    OSB update."""
    if desired is None:
        return True
    held = held or {}
    return any(held.get(key, 0 if key == "updateRequests" else None) != desired.get(key) for key in UPDATED_BY)


def next_step(facts: InstanceFacts) -> Step:
    """The one step due, from the status (one operation at a time)."""
    instance = facts.instance
    status, deleting = instance.status, instance.meta.deleting
    if not instance.held:
        return Step.NOTHING if deleting else Step.ADD_FINALIZER
    if not facts.owns_id:
        # Someone else's id: nothing is ever sent for it, whatever the status (its owner can write it) says.
        return Step.REMOVE_FINALIZER if deleting else Step.UNRESOLVED
    if (status.async_op or status.orphan_mitigation) and facts.offering is None:
        # Polling and mitigating speak to the class's broker; without one (class or broker gone) nothing can be
        # sent: said on the object, and looked at again when they return. (The status may be anyone's words.)
        return Step.UNRESOLVED
    if status.async_op:
        return Step.POLL  # one operation at a time, a deletion included
    if status.orphan_mitigation:
        return Step.MITIGATE
    if deleting:
        if facts.bindings:
            return Step.BLOCKED
        if status.deprovision_owed:
            return Step.DEPROVISION if facts.offering is not None else Step.UNRESOLVED
        return Step.REMOVE_FINALIZER
    if facts.problem is not None:
        return Step.UNRESOLVED
    if instance.observed:
        return Step.NOTHING  # settled, or failed and waiting for a spec change
    if status.provisioned and not needs_update(status.external_properties, facts.desired):
        return Step.SETTLE
    if facts.over_budget is not None:
        return Step.WAIT_FOR_BUDGET
    return Step.UPDATE if status.provisioned else Step.PROVISION


def plan(facts: InstanceFacts) -> list[Any]:
    """The actions of the step due."""
    step = next_step(facts)
    instance, now = facts.instance, facts.now
    match step:
        case Step.NOTHING:  # a settled Instance of an instances_retrievable class is looked at again (day two)
            return live.look(
                instance,
                facts.offering,
                last=facts.last_look,
                monotonic=facts.monotonic,
                now=now,
                resync_seconds=facts.resync_seconds,
            )
        case Step.ADD_FINALIZER:
            return [a.EnsureFinalizer(True), a.Continue()]
        case Step.REMOVE_FINALIZER:
            return [a.EnsureFinalizer(False)]
        case Step.SETTLE:
            return [a.WriteStatus({"observedGeneration": facts.instance.meta.generation})]
        case Step.BLOCKED:
            names = ", ".join(facts.bindings)
            message = (
                f"deletion waits: {len(facts.bindings)} binding(s) still use this instance ({names}); delete them first"
            )
            # No requeue: a binding's deletion queues the instance again.
            return said(instance, ready=False, reason=Reason.INSTANCE_DELETE_BLOCKED, message=message, now=now)
        case Step.UNRESOLVED:
            return unresolved(instance, facts.problem or NO_OFFERING, now=now, again=facts.recheck_in)
        case Step.POLL:
            return calls.early(facts.pacing, facts.monotonic) or poll(facts)
        case Step.WAIT_FOR_BUDGET:
            return waiting_for_budget(instance, facts.over_budget or "", now=now, again=facts.recheck_in)
        case Step.MITIGATE | Step.DEPROVISION:
            return deprovision(facts, mitigation=step is Step.MITIGATE)
        case _:
            return provision_or_update(facts, update=step is Step.UPDATE)


# -- the requests -------------------------------------------------------------------------------------------------


def provision_or_update(facts: InstanceFacts, *, update: bool) -> list[Any]:
    """Record the operation, then send it (record first: a crash in between repeats it with the same id)."""
    instance, offering, parameters = facts.instance, facts.offering, facts.parameters
    assert offering is not None and parameters is not None
    external_id = tenancy.external_id(instance)
    operation = InstanceOperation.UPDATE if update else InstanceOperation.PROVISION
    reason = Reason.UPDATING if update else Reason.PROVISIONING
    what = operation.value.lower()
    record = a.WriteStatus(
        operations.recorded(
            operation.value,
            timestamp(facts.now),
            externalID=external_id,
            inProgressProperties=properties(offering, parameters, facts.instance.instance_spec),
            **({} if update else {"deprovisionStatus": DeprovisionStatus.REQUIRED.value}),
            conditions=conditions(
                instance,
                ready=update,
                reason=reason,
                message=after_failure(instance, f"{what} requested"),
                now=facts.now,
            ),
        )
    )
    meta = facts.instance.meta
    common = {"parameters": dict(parameters), "context": context(meta), "identity": identity_of(meta)}
    if update:
        held_plan = facts.instance.status.held_plan.external_id or None
        kwargs = {
            "service_id": offering.service_id,
            "plan_id": offering.plan_id if offering.plan_id != held_plan else None,
            **common,
        }
    else:
        kwargs = {
            "service_id": offering.service_id,
            "plan_id": offering.plan_id,
            "organization_guid": meta.namespace,
            "space_guid": meta.namespace,
            **common,
        }
    then = partial(answered, facts, operation)
    return [record, Call(offering.broker, what, (external_id,), kwargs, then)]


def poll(facts: InstanceFacts) -> list[Any]:
    offering, status = facts.offering, facts.instance.status
    assert offering is not None
    operation = _operation(status.current_operation)
    kwargs = {"operation": status.last_operation, "service_id": offering.service_id, "plan_id": offering.plan_id}
    then = partial(polled, facts, operation)
    return [Call(offering.broker, "last_operation", (tenancy.external_id(facts.instance),), kwargs, then)]


def deprovision(facts: InstanceFacts, *, mitigation: bool) -> list[Any]:
    instance, offering = facts.instance, facts.offering
    assert offering is not None
    listed = conditions(
        instance,
        ready=False,
        reason=Reason.ORPHAN_MITIGATION if mitigation else Reason.DEPROVISIONING,
        message=after_failure(instance, "orphan mitigation: deprovisioning") if mitigation else "deprovisioning",
        now=facts.now,
    )
    record = a.WriteStatus(
        operations.recorded(
            InstanceOperation.DEPROVISION.value,
            timestamp(facts.now),
            conditions=keeping_failed(instance, listed, keep=mitigation and terminal_mitigation(instance)),
        )
    )
    kwargs = {
        "service_id": offering.service_id,
        "plan_id": offering.plan_id,
        "identity": identity_of(instance.meta),
    }
    then = partial(removal_answered, facts)
    return [record, Call(offering.broker, "deprovision", (tenancy.external_id(facts.instance),), kwargs, then)]


# -- what an answer leads to (``body``: the Instance as last written, the operation recorded) ------------------


def answered(
    facts: InstanceFacts,
    operation: InstanceOperation,
    answer: osbclient.InstanceResult | osbclient.BrokerError,
    body: JsonObject,
) -> list[Any]:
    """A provision's or update's answer."""
    written = CatalogObject.of(body)
    if isinstance(answer, osbclient.BrokerError):
        return decided(facts, operation, operations.refused(REQUESTS[operation], answer), written)
    update = operation is InstanceOperation.UPDATE
    what = operation.value.lower()
    warned = ignored(answer.warnings, what)
    if answer.is_async:
        reason = Reason.UPDATING if update else Reason.PROVISIONING
        working = conditions(
            written, ready=update, reason=reason, message=f"the broker is working on the {what}", now=facts.now
        )
        accepted = a.WriteStatus({**operations.accepted(answer.operation), "conditions": working})
        return [*warned, accepted, *calls.accepted(facts.pacing, facts.polls, facts.monotonic, facts.draw)]
    return [*warned, *succeeded(facts, operation, written, dashboard_url=answer.dashboard_url)]


def polled(
    facts: InstanceFacts,
    operation: InstanceOperation,
    answer: osbclient.LastOperation | osbclient.BrokerError,
    body: JsonObject,
) -> list[Any]:
    """A ``last_operation`` poll's answer (this poll counted)."""
    written = CatalogObject.of(body)
    pacing = replace(facts.pacing, polls=facts.pacing.polls + 1)
    decision = operations.polled(
        REQUESTS[operation],
        answer,
        started=parse_time(facts.instance.status.operation_start),
        now=facts.now,
        polls=pacing.polls,
        backoff=facts.polls,
        draw=facts.draw,
    )
    return decided(replace(facts, pacing=pacing), operation, decision, written)


def removal_answered(
    facts: InstanceFacts, answer: osbclient.InstanceResult | osbclient.BrokerError, body: JsonObject
) -> list[Any]:
    """A deprovision's answer (a deletion's, or orphan mitigation's)."""
    written = CatalogObject.of(body)
    if isinstance(answer, osbclient.BrokerError):
        refused = operations.refused(Request.DEPROVISION, answer)
        return decided(facts, InstanceOperation.DEPROVISION, refused, written)
    if answer.is_async:
        accepted = a.WriteStatus(operations.accepted(answer.operation))
        return [accepted, *calls.accepted(facts.pacing, facts.polls, facts.monotonic, facts.draw)]
    return deprovisioned(facts, written)


def decided(
    facts: InstanceFacts, operation: InstanceOperation, decision: operations.Decision, written: CatalogObject
) -> list[Any]:
    if decision.verdict is Verdict.POLL:
        return calls.scheduled(facts.pacing, decision.delay, facts.monotonic)
    if decision.verdict is Verdict.SUCCEEDED:
        if operation is InstanceOperation.DEPROVISION:
            return deprovisioned(facts, written)
        return succeeded(facts, operation, written, dashboard_url=None)
    if decision.verdict is Verdict.RETRY:
        message = f"{decision.message}; retrying"
        return [
            *said(written, ready=False, reason=failure_reason(operation), message=message, now=facts.now),
            *calls.retried(facts.pacing, facts.retries, facts.draw),
        ]
    return operation_failed(facts, operation, decision, written)


def succeeded(
    facts: InstanceFacts, operation: InstanceOperation, written: CatalogObject, *, dashboard_url: str | None
) -> list[Any]:
    provision = operation is InstanceOperation.PROVISION
    message = f"the broker {'provisioned' if provision else 'updated'} the instance"
    reason = Reason.PROVISIONED if provision else Reason.INSTANCE_UPDATED
    asked = written.status.in_progress_properties
    patch = operations.finished(
        written,
        provisionStatus=ProvisionStatus.PROVISIONED.value,
        deprovisionStatus=DeprovisionStatus.REQUIRED.value,
        externalProperties=dict(asked) or None,
        **({"dashboardURL": dashboard_url} if dashboard_url else {}),
        conditions=conditions(written, ready=True, reason=reason, message=message, now=facts.now),
    )
    return [*calls.succeeded(facts.pacing), a.WriteStatus(patch, event=a.Event(reason.value, message))]


def deprovisioned(facts: InstanceFacts, written: CatalogObject) -> list[Any]:
    instance = written
    mitigation = instance.status.orphan_mitigation
    final = mitigation and terminal_mitigation(written)
    fields: JsonBody = {}
    if mitigation:
        after = STAYS_FAILED if final else "provisioning is retried"
        mitigated = conditions(
            written,
            ready=False,
            reason=Reason.ORPHAN_MITIGATION_SUCCESSFUL,
            message=after_failure(
                written, f"orphan mitigation deprovisioned what the failed provision may have left; {after}"
            ),
            now=facts.now,
        )
        fields["conditions"] = keeping_failed(written, mitigated, keep=final)
    write = a.WriteStatus(
        operations.removed(
            provisionStatus=ProvisionStatus.NOT_PROVISIONED.value,
            deprovisionStatus=DeprovisionStatus.SUCCEEDED.value,
            **fields,
        )
    )
    if instance.meta.deleting:
        return [write, a.EnsureFinalizer(False)]
    if final:
        return [write]  # failed for good: a spec change queues it again
    # Mitigation done: provision again, after a pause.
    return [write, *calls.retried(facts.pacing, facts.retries, facts.draw)]


def operation_failed(
    facts: InstanceFacts, operation: InstanceOperation, decision: operations.Decision, written: CatalogObject
) -> list[Any]:
    message, now = decision.message, facts.now
    reason = Reason.ASYNC_OPERATION_TIMED_OUT if decision.timed_out else failure_reason(operation)
    if decision.mitigate:
        return mitigation_follows(written, reason=reason, message=message, final=decision.final, now=now)
    if operation is InstanceOperation.DEPROVISION:  # sent again, after a pause: a deletion has no spec to change
        return [
            *removal_failed(written, "deprovisionStatus", reason=reason, message=message, now=now),
            *calls.retried(facts.pacing, facts.retries, facts.draw),
        ]
    extra: JsonBody = {}
    provisioned = written.status.provisioned
    if operation is InstanceOperation.PROVISION and not provisioned:
        reason, disown = tenancy.refusal(chosen_id=tenancy.chosen(written), status=decision.answered, failure=reason)
        if disown:  # the broker made nothing of ours under this id: deleting the Instance asks it nothing
            extra["deprovisionStatus"] = DeprovisionStatus.NOT_REQUIRED.value
        if reason is Reason.EXTERNAL_ID_IN_USE:
            message = (
                f"{message}: the broker already has an instance {tenancy.external_id(written)!r}, which is not this "
                "Instance's; it is never updated, bound or deprovisioned from here (create the Instance again "
                "with another externalID, or none)"
            )
    message = f"{message}; {STAYS_FAILED}"
    failure = conditions(written, ready=provisioned, reason=reason, message=message, failed=True, now=now)
    event = a.Event(reason.value, message, warning=True)
    return [a.WriteStatus(operations.failed(written, conditions=failure, **extra), event=event)]


def context(meta: Meta) -> dict[str, str]:
    return {"platform": "kubernetes", "namespace": meta.namespace, "instance_name": meta.name}


def failure_reason(operation: InstanceOperation) -> Reason:
    return {
        InstanceOperation.PROVISION: Reason.PROVISION_CALL_FAILED,
        InstanceOperation.UPDATE: Reason.UPDATE_CALL_FAILED,
        InstanceOperation.DEPROVISION: Reason.DEPROVISION_CALL_FAILED,
    }[operation]


def _operation(value: str | None) -> InstanceOperation:
    try:
        return InstanceOperation(value or InstanceOperation.PROVISION.value)
    except ValueError:
        return InstanceOperation.PROVISION
