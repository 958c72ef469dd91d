"""A Binding's plan: every decision of binding, storing the credentials, projecting and unbinding, pure.

Like :mod:`.instance_plan`: :func:`plan` turns the facts into actions — the executor's generic ones,
:class:`~.calls.Call` for an OSB request (its answer decided by :func:`answered`, :func:`polled`,
:func:`fetched`, :func:`removal_answered`), and the Binding's own effects: :class:`StoreCredentials` (its
outcome decided by :func:`stored`), :class:`ReleaseCredentials` and :class:`Project`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from functools import partial
from typing import Any

from opbroker import osbclient
from opbroker.api.primaza import ApplicationSelector
from opbroker.api.servicecatalog import BindingOperation, UnbindStatus
from opbroker.controller.claims import workloads
from opbroker.controller.claims.core.views import WorkloadView
from opbroker.controller.core import actions as a
from opbroker.controller.core.reasons import Reason
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.controller.servicecatalog.core import calls, operations, tenancy
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
from opbroker.controller.servicecatalog.core.views import CatalogObject
from opbroker.kubeclient.wire import JsonBody, JsonObject
from opbroker.osbclient import Request

SECRET_TYPE = "servicecatalog.k8s.io/binding-credentials"
#: What a Secret's data key may be (the API server refuses any other): credentials with another key cannot be
#: stored, so the bind fails for good (and is unbound) instead of being written again and again.
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Step(StrEnum):
    NOTHING = "nothing"
    ADD_FINALIZER = "add-finalizer"
    REMOVE_FINALIZER = "remove-finalizer"
    UNRESOLVED = "unresolved"
    BIND = "bind"
    POLL = "poll"
    UNBIND = "unbind"
    MITIGATE = "mitigate"
    PROJECT = "project"
    """A bound binding whose selected workloads do not all carry its projection (or others still do)."""
    WAIT_FOR_BUDGET = "wait-for-budget"
    """A bind its namespace's budget holds back (``controller.core.budgets``)."""


# -- the Binding's own actions ------------------------------------------------------------------------------------


class Stored(StrEnum):
    WRITTEN = "written"
    NOT_OURS = "not-ours"
    """A Secret of that name appeared meanwhile without the Binding's stamp: left untouched."""


@dataclass(frozen=True)
class StoreCredentials:
    """Write the credentials Secret ``manifest`` — created, or over the live one only when it carries the
    Binding's stamp (``tenancy.may_write_secret``) — as the namespace's account; ``then`` decides on the
    outcome (:class:`Stored`, or the API server's masked refusal as a string)."""

    manifest: JsonBody = field(repr=False)
    owner_uid: str
    namespace: str
    name: str
    """Where the Secret goes (the manifest's namespace and name)."""
    then: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class ReleaseCredentials:
    """Delete the credentials Secret if the live one carries the Binding's stamp, else leave it."""

    namespace: str
    name: str
    owner_uid: str


@dataclass(frozen=True)
class Project:
    """Server-side apply ``patches`` (workload projections and withdrawals) as ``field_manager``, as the
    namespace's account."""

    namespace: str
    field_manager: str
    patches: tuple[JsonObject, ...] = field(repr=False)


# -- facts --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BindingFacts:
    key: Key
    body: JsonObject = field(repr=False)
    instance: JsonObject | None = field(repr=False)
    offering: Offering | None
    parameters: JsonObject | None
    problem: Unresolved | None
    workloads: tuple[WorkloadView, ...] = field(default=(), repr=False)
    """The binding namespace's workloads of its application's kind (listed only with ``spec.application``)."""
    consented: bool = True
    """The Instance exists and may be used from the Binding's namespace (``tenancy.shared_with``)."""
    owns_ids: bool = True
    """The Binding holds its binding id and the Instance its instance id (``tenancy.holds_external_id``)."""
    secret_data: Mapping[str, str] | None = field(default=None, repr=False)
    """The live credentials Secret's (encoded) data, when read (to project it)."""
    pacing: Pacing = field(default_factory=Pacing)
    now: datetime = _EPOCH
    monotonic: float = 0.0
    polls: osbclient.Backoff = DEFAULTS.broker_polls
    retries: osbclient.Backoff = DEFAULTS.broker_retries
    """The backoff of a transient failure's retry (the policy table's ``broker_retries``)."""
    rechecks: osbclient.Backoff = DEFAULTS.unresolved_recheck
    """The look again at a Binding that cannot go on yet (unresolved, over its namespace's budget)."""
    draw: float = 0.0
    """A random draw in [0, 1) taken by the edge (the policy table's source), jittering the waits; 0: none."""
    over_budget: str | None = None
    """Why the namespace may start no new operation now (``controller.core.budgets.refusal``; None: it may)."""
    binding: CatalogObject = field(init=False, repr=False)
    target: CatalogObject | None = field(init=False, repr=False)
    """The Instance as read (a view of ``instance``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "binding", CatalogObject.of(self.body))
        object.__setattr__(self, "target", None if self.instance is None else CatalogObject.of(self.instance))

    @property
    def recheck_in(self) -> float:
        """When to look again at an object that cannot go on yet: :attr:`rechecks`, jittered by :attr:`draw`."""
        return self.rechecks.delay(1, self.draw)


def unstorable_keys(credentials: JsonObject | None) -> list[str]:
    """The credential keys a Secret cannot hold (the names of credentials are no secret, their values are)."""
    return [key for key in credentials or {} if not _SECRET_KEY.match(key)]


def field_manager(binding: str) -> str:
    """The server-side-apply field manager owning exactly one Binding's projection into workloads."""
    return f"opbroker-scbinding-{binding}"[:128]


def application_of(binding: CatalogObject) -> ApplicationSelector | None:
    """The workloads a Binding's credentials project into (``spec.application``), None: none."""
    raw = binding.binding_spec.application
    return ApplicationSelector.model_validate(raw) if raw else None


def instance_ref(body: JsonObject) -> tuple[str, str]:
    """A Binding's Instance: (namespace, name)."""
    return CatalogObject.of(body).instance_ref


def secret_name(body: JsonObject) -> str:
    """A Binding's credentials Secret's name."""
    return CatalogObject.of(body).secret_name


def projection_drift(facts: BindingFacts) -> bool:
    """Whether a selected workload lacks the projection of the current Secret, or an unselected one has it."""
    application = application_of(facts.binding)
    name = facts.binding.meta.name
    digest = facts.binding.status.projection_hash
    for workload in facts.workloads:
        held = workload.template_annotations.get(workloads.hash_annotation(name))
        selected = application is not None and workloads.selected(application, workload)
        if selected and (held is None or held != digest):
            return True
        if not selected and workloads.managed_by(workload, field_manager(name)):
            return True
    return False


def projection(facts: BindingFacts, data: Mapping[str, str], *, withdraw: bool) -> tuple[list[Any], str | None]:
    """The actions projecting the Secret (``data``) into the selected workloads and withdrawing it from the
    others (all, with ``withdraw``), and the content hash the pods carry (a new one rolls them), None without
    an application."""
    name = facts.binding.meta.name
    application = None if withdraw else application_of(facts.binding)
    digest = hashlib.sha256(json.dumps(dict(data), sort_keys=True).encode()).hexdigest()[:16]
    manager = field_manager(name)
    patches: list[JsonObject] = []
    for workload in facts.workloads:
        if application is not None and workloads.selected(application, workload):
            patches.append(
                workloads.projection(
                    workload,
                    claim=name,
                    secret_name=facts.binding.secret_name,
                    keys=sorted(data),
                    content_hash=digest,
                )
            )
        elif workloads.managed_by(workload, manager):
            patches.append(workloads.unprojection(workload))
    done = [Project(facts.binding.meta.namespace, manager, tuple(patches))] if patches else []
    return done, digest if application is not None else None


def next_step(facts: BindingFacts) -> Step:
    binding = facts.binding
    status, deleting = binding.status, binding.meta.deleting
    if not binding.held:
        return Step.NOTHING if deleting else Step.ADD_FINALIZER
    if not facts.owns_ids:
        # Someone else's binding or instance id: nothing is ever sent for it, whatever the status says.
        return Step.REMOVE_FINALIZER if deleting else Step.UNRESOLVED
    if (status.async_op or status.orphan_mitigation) and facts.offering is None:
        return Step.UNRESOLVED  # nothing can be sent without the class's broker (see instance_plan.next_step)
    if status.async_op:
        return Step.POLL
    if status.orphan_mitigation:
        return Step.MITIGATE
    bound = status.unbind_owed
    if deleting:
        if bound:
            return Step.UNBIND if facts.offering is not None else Step.UNRESOLVED
        return Step.REMOVE_FINALIZER
    if not facts.consented:  # no consent (or no instance): nothing is bound; consent withdrawn unbinds
        return Step.UNBIND if bound and facts.offering is not None else Step.UNRESOLVED
    if facts.problem is not None:
        return Step.UNRESOLVED
    if binding.observed:
        settled = status.unbind_status == UnbindStatus.REQUIRED.value and status.secret_name
        return Step.PROJECT if settled and projection_drift(facts) else Step.NOTHING
    return Step.WAIT_FOR_BUDGET if facts.over_budget is not None else Step.BIND


def plan(facts: BindingFacts) -> list[Any]:
    step = next_step(facts)
    now = facts.now
    match step:
        case Step.NOTHING:
            return []
        case Step.ADD_FINALIZER:
            return [a.EnsureFinalizer(True), a.Continue()]
        case Step.PROJECT:
            return projection(facts, facts.secret_data or {}, withdraw=False)[0]
        case Step.REMOVE_FINALIZER:
            return [*released(facts), a.EnsureFinalizer(False)]
        case Step.UNRESOLVED:
            return unresolved(facts.binding, facts.problem or NO_OFFERING, now=now, again=facts.recheck_in)
        case Step.WAIT_FOR_BUDGET:
            return waiting_for_budget(facts.binding, facts.over_budget or "", now=now, again=facts.recheck_in)
        case Step.POLL:
            return calls.early(facts.pacing, facts.monotonic) or poll(facts)
        case Step.UNBIND | Step.MITIGATE:
            return unbind(facts)
        case _:
            return bind(facts)


def released(facts: BindingFacts) -> list[Any]:
    """Withdraw the projection and delete the credentials Secret (if it is the Binding's)."""
    meta = facts.binding.meta
    withdrawn, _ = projection(facts, {}, withdraw=True)
    return [*withdrawn, ReleaseCredentials(meta.namespace, facts.binding.secret_name, meta.uid)]


# -- the requests -------------------------------------------------------------------------------------------------


def _ids(facts: BindingFacts) -> tuple[str, str]:
    assert facts.target is not None
    return tenancy.external_id(facts.target), tenancy.external_id(facts.binding)


def bind(facts: BindingFacts) -> list[Any]:
    binding, offering, parameters = facts.binding, facts.offering, facts.parameters
    assert offering is not None and parameters is not None
    instance_id, binding_id = _ids(facts)
    record = a.WriteStatus(
        operations.recorded(
            BindingOperation.BIND.value,
            timestamp(facts.now),
            externalID=binding_id,
            unbindStatus=UnbindStatus.REQUIRED.value,
            inProgressProperties={"parametersChecksum": checksum(parameters)},
            conditions=conditions(
                binding,
                ready=False,
                reason=Reason.BINDING_IN_PROGRESS,
                message=after_failure(binding, "binding"),
                now=facts.now,
            ),
        )
    )
    kwargs = {
        "service_id": offering.service_id,
        "plan_id": offering.plan_id,
        "parameters": dict(parameters),
        "context": {"platform": "kubernetes", "namespace": facts.binding.meta.namespace},
        "identity": identity_of(facts.binding.meta),
    }
    return [record, Call(offering.broker, "bind", (instance_id, binding_id), kwargs, partial(answered, facts))]


def poll(facts: BindingFacts) -> list[Any]:
    offering, status = facts.offering, facts.binding.status
    assert offering is not None
    request = Request.UNBIND if status.current_operation == BindingOperation.UNBIND.value else Request.BIND
    kwargs = {"operation": status.last_operation, "service_id": offering.service_id, "plan_id": offering.plan_id}
    then = partial(polled, facts, request)
    return [Call(offering.broker, "binding_last_operation", _ids(facts), kwargs, then)]


def unbind(facts: BindingFacts) -> list[Any]:
    binding, offering = facts.binding, facts.offering
    assert offering is not None
    mitigation = facts.binding.status.orphan_mitigation
    step = after_failure(binding, "orphan mitigation: unbinding") if mitigation else "unbinding"
    listed = conditions(binding, ready=False, reason=Reason.UNBINDING, message=step, now=facts.now)
    record = a.WriteStatus(
        operations.recorded(
            BindingOperation.UNBIND.value,
            timestamp(facts.now),
            conditions=keeping_failed(binding, listed, keep=mitigation and terminal_mitigation(binding)),
        )
    )
    kwargs = {
        "service_id": offering.service_id,
        "plan_id": offering.plan_id,
        "identity": identity_of(facts.binding.meta),
    }
    return [record, Call(offering.broker, "unbind", _ids(facts), kwargs, partial(removal_answered, facts))]


# -- what an answer leads to (``body``: the Binding as last written) --------------------------------------------


def answered(
    facts: BindingFacts, answer: osbclient.BindingResult | osbclient.BrokerError, body: JsonObject
) -> list[Any]:
    """A bind's answer."""
    written = CatalogObject.of(body)
    if isinstance(answer, osbclient.BrokerError):
        return decided(facts, Request.BIND, operations.refused(Request.BIND, answer), written)
    warned = ignored(answer.warnings, "bind")
    if answer.is_async:
        accepted = a.WriteStatus(operations.accepted(answer.operation))
        return [*warned, accepted, *calls.accepted(facts.pacing, facts.polls, facts.monotonic, facts.draw)]
    return [*warned, *bound(facts, answer, written)]


def polled(
    facts: BindingFacts, request: Request, answer: osbclient.LastOperation | osbclient.BrokerError, body: JsonObject
) -> list[Any]:
    """A ``last_operation`` poll's answer; an asynchronous bind that succeeded is fetched (its credentials)."""
    written = CatalogObject.of(body)
    pacing = replace(facts.pacing, polls=facts.pacing.polls + 1)
    decision = operations.polled(
        request,
        answer,
        started=parse_time(facts.binding.status.operation_start),
        now=facts.now,
        polls=pacing.polls,
        backoff=facts.polls,
        draw=facts.draw,
    )
    facts = replace(facts, pacing=pacing)
    if decision.verdict is Verdict.SUCCEEDED and request is Request.BIND:
        offering = facts.offering
        assert offering is not None
        kwargs = {"service_id": offering.service_id, "plan_id": offering.plan_id}
        return [Call(offering.broker, "get_binding", _ids(facts), kwargs, partial(fetched, facts))]
    return decided(facts, request, decision, written)


def fetched(
    facts: BindingFacts, answer: osbclient.BindingResult | osbclient.BrokerError, body: JsonObject
) -> list[Any]:
    """An asynchronous bind's fetch."""
    written = CatalogObject.of(body)
    if isinstance(answer, osbclient.BrokerError):
        return decided(facts, Request.BIND, operations.fetched(answer), written)
    return bound(facts, answer, written)


def removal_answered(
    facts: BindingFacts, answer: osbclient.BindingResult | osbclient.BrokerError, body: JsonObject
) -> list[Any]:
    """An unbind's answer (a deletion's, consent withdrawn, or orphan mitigation's)."""
    written = CatalogObject.of(body)
    if isinstance(answer, osbclient.BrokerError):
        return decided(facts, Request.UNBIND, operations.refused(Request.UNBIND, answer), written)
    if answer.is_async:
        accepted = a.WriteStatus(operations.accepted(answer.operation))
        return [accepted, *calls.accepted(facts.pacing, facts.polls, facts.monotonic, facts.draw)]
    return unbound(facts, written)


def bound(facts: BindingFacts, result: osbclient.BindingResult, written: CatalogObject) -> list[Any]:
    """The broker bound: store the credentials (their outcome decided by :func:`stored`)."""
    credentials: JsonObject = result.credentials or {}
    unstorable = unstorable_keys(credentials)
    if unstorable:
        shown = ", ".join(repr(key[:64]) for key in unstorable[:5])
        message = (
            f"the broker's credentials hold key(s) a Secret cannot ({shown}: only letters, digits, '-', '_' "
            "and '.'): nothing was written"
        )
        return failed(facts, written, message, mitigate=True, reason=Reason.BIND_RESULT_REFUSED, final=True)
    data = {
        key: base64.b64encode((value if isinstance(value, str) else json.dumps(value)).encode()).decode()
        for key, value in credentials.items()
    }
    manifest = secret_manifest(written, data)
    meta = facts.binding.meta
    return [StoreCredentials(manifest, meta.uid, meta.namespace, written.secret_name, partial(stored, facts, data))]


def stored(facts: BindingFacts, data: Mapping[str, str], outcome: str, body: JsonObject) -> list[Any]:
    """What writing the credentials Secret came to: the binding is ready, or the bind failed (mitigated)."""
    written = CatalogObject.of(body)
    name = written.secret_name
    if outcome == Stored.NOT_OURS:
        message = f"Secret {name!r} appeared meanwhile and was not made by this Binding: it is left untouched"
        return failed(facts, written, message, mitigate=True, reason=Reason.SECRET_NOT_OWNED)
    if outcome != Stored.WRITTEN:
        message = f"the credentials cannot be stored: {outcome}"
        return failed(facts, written, message, mitigate=True, reason=Reason.BIND_RESULT_REFUSED, final=True)
    projected, digest = projection(facts, data, withdraw=False)
    asked = written.status.in_progress_properties
    properties = {**asked, **({"projectionHash": digest} if digest else {})}
    stored_in = f"the credentials are in Secret {name!r}"
    patch = operations.finished(
        written,
        secretName=name,
        externalProperties=properties,
        conditions=conditions(written, ready=True, reason=Reason.INJECTED_BINDING, message=stored_in, now=facts.now),
    )
    event = a.Event(Reason.INJECTED_BINDING.value, f"credentials in Secret {name!r}")
    return [*calls.succeeded(facts.pacing), *projected, a.WriteStatus(patch, event=event)]


def unbound(facts: BindingFacts, written: CatalogObject) -> list[Any]:
    binding = written
    orphan = binding.status.orphan_mitigation
    final = orphan and terminal_mitigation(written)
    # Consent withdrawn from a bound Binding (not deleted, no mitigation): it waits for consent again.
    revoked = not orphan and not binding.meta.deleting and not facts.consented
    fields: JsonBody = {"unbindStatus": UnbindStatus.SUCCEEDED.value}
    if final:
        mitigated = conditions(
            written,
            ready=False,
            reason=Reason.ORPHAN_MITIGATION_SUCCESSFUL,
            message=after_failure(
                written,
                "orphan mitigation unbound what the failed bind may have left; the binding stays failed until its "
                "spec changes",
            ),
            now=facts.now,
        )
        fields["conditions"] = keeping_failed(written, mitigated, keep=True)
    if revoked and facts.problem is not None:
        fields.update(
            {
                "observedGeneration": None,  # bound again once consent returns
                "secretName": None,
                "externalProperties": None,
                "conditions": conditions(
                    written, ready=False, reason=Reason.REFERENCE_NOT_SHARED, message=str(facts.problem), now=facts.now
                ),
            }
        )
    done = [*released(facts), a.WriteStatus(operations.removed(**fields))]
    if binding.meta.deleting:
        return [*done, a.EnsureFinalizer(False)]
    if revoked:
        # The Instance's changes queue the Binding again.
        return [*done, a.Event(Reason.REFERENCE_NOT_SHARED.value, str(facts.problem), warning=True)]
    if final:
        return done  # failed for good: a spec change queues it again
    return [*done, *calls.retried(facts.pacing, facts.retries, facts.draw)] if orphan else done


def decided(facts: BindingFacts, request: Request, decision: operations.Decision, written: CatalogObject) -> list[Any]:
    if decision.verdict is Verdict.POLL:
        return calls.scheduled(facts.pacing, decision.delay, facts.monotonic)
    if decision.verdict is Verdict.SUCCEEDED:  # an unbind (a bind's success is fetched first)
        return unbound(facts, written)
    failure = Reason.UNBIND_CALL_FAILED if request is Request.UNBIND else Reason.BIND_CALL_FAILED
    if decision.verdict is Verdict.RETRY:
        message = f"{decision.message}; retrying"
        return [
            *said(written, ready=False, reason=failure, message=message, now=facts.now),
            *calls.retried(facts.pacing, facts.retries, facts.draw),
        ]
    reason = Reason.ASYNC_OPERATION_TIMED_OUT if decision.timed_out else failure
    if request is Request.UNBIND:  # sent again, after a pause: a deletion has no spec to change
        return [
            *removal_failed(written, "unbindStatus", reason=reason, message=decision.message, now=facts.now),
            *calls.retried(facts.pacing, facts.retries, facts.draw),
        ]
    return failed(
        facts,
        written,
        decision.message,
        mitigate=decision.mitigate,
        reason=reason,
        final=decision.final,
        refused=decision.refused,
        answered=decision.answered,
    )


def failed(
    facts: BindingFacts,
    written: CatalogObject,
    message: str,
    *,
    mitigate: bool,
    reason: Reason = Reason.BIND_CALL_FAILED,
    final: bool = False,
    refused: bool = False,
    answered: int | None = None,
) -> list[Any]:
    """A failed bind. With ``mitigate``, orphan mitigation (an unbind) follows; ``final``: the broker's verdict
    (a failed or timed-out operation) stands, so the binding is marked failed now and stays so once mitigated,
    until its spec changes (a 5xx or a lost answer is retried instead). ``refused``: the bind request was
    refused for good (``answered``: the broker's status, if it sent one)."""
    now = facts.now
    if mitigate:
        return mitigation_follows(written, reason=reason, message=message, final=final, now=now)
    extra: JsonBody = {}
    if refused and not written.status.external_properties:  # never bound before
        reason, disown = tenancy.refusal(chosen_id=tenancy.chosen(written), status=answered, failure=reason)
        if disown:  # the broker made nothing of ours under this id: deleting the Binding asks it nothing
            extra["unbindStatus"] = UnbindStatus.NOT_REQUIRED.value
        if reason is Reason.EXTERNAL_ID_IN_USE:
            message = (
                f"{message}: the broker already has a binding {tenancy.external_id(written)!r}, which is not this "
                "Binding's; it is never unbound from here (create the Binding again with another externalID, "
                "or none)"
            )
    failure = conditions(written, ready=False, reason=reason, message=message, failed=True, now=now)
    event = a.Event(reason.value, message, warning=True)
    return [a.WriteStatus(operations.failed(written, conditions=failure, **extra), event=event)]


def secret_manifest(written: CatalogObject, data: Mapping[str, str]) -> JsonBody:
    """The credentials Secret: owned by the Binding, stamped with its uid (the only Secret it overwrites)."""
    binding = written
    meta = binding.meta
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": SECRET_TYPE,
        "metadata": {
            "name": binding.secret_name,
            "namespace": meta.namespace,
            "labels": {"servicecatalog.k8s.io/binding": meta.name},
            "annotations": tenancy.stamp(meta.uid),
            "ownerReferences": [binding.owner_reference],
        },
        "data": dict(data),
    }
