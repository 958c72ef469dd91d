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
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from kubernetes.client.exceptions import ApiException

from opbroker import osbclient
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.primaza import ApplicationSelector
from opbroker.api.servicecatalog import BindingOperation, ProvisionStatus, UnbindStatus
from opbroker.controller.claims import workloads
from opbroker.controller.core import refusals
from opbroker.controller.core.reasons import Reason
from opbroker.controller.kube import Kube
from opbroker.controller.reconciler import DONE, Key, Memories, ObservePlanAct, Outcome, requeue
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
    say,
    timestamp,
    warn_ignored,
)
from opbroker.controller.servicecatalog.core import operations, tenancy
from opbroker.controller.servicecatalog.core.endpoints import identity_of
from opbroker.controller.servicecatalog.core.operations import Verdict, keeping_failed, terminal_mitigation
from opbroker.controller.servicecatalog.resources import BINDINGS, FINALIZER, INSTANCES, CatalogApi
from opbroker.osbclient import Request

SECRET_TYPE = "servicecatalog.k8s.io/binding-credentials"
#: What a Secret's data key may be (the API server refuses any other): credentials with another key cannot be
#: stored, so the bind fails for good (and is unbound) instead of being written again and again.
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


def unstorable_keys(credentials: dict[str, Any] | None) -> list[str]:
    """The credential keys a Secret cannot hold (pure; the names of credentials are no secret, their values are)."""
    return [key for key in credentials or {} if not _SECRET_KEY.match(key)]


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


@dataclass(frozen=True)
class BindingFacts:
    key: Key
    body: dict[str, Any]
    instance: dict[str, Any] | None
    offering: Offering | None
    parameters: dict[str, Any] | None
    problem: Unresolved | None
    workloads: tuple[dict[str, Any], ...] = ()
    """The binding namespace's workloads of its application's kind (listed only with ``spec.application``)."""
    consented: bool = True
    """The Instance exists and may be used from the Binding's namespace (``tenancy.shared_with``)."""
    owns_ids: bool = True
    """The Binding holds its binding id and the Instance its instance id (``tenancy.holds_external_id``)."""


def field_manager(binding: str) -> str:
    """The server-side-apply field manager owning exactly one Binding's projection into workloads."""
    return f"opbroker-scbinding-{binding}"[:128]


def application_of(body: dict[str, Any]) -> ApplicationSelector | None:
    raw = (body.get("spec") or {}).get("application")
    return ApplicationSelector.model_validate(raw) if raw else None


def projection_drift(facts: BindingFacts) -> bool:
    """Whether a selected workload lacks the projection of the current Secret, or an unselected one has it."""
    body = facts.body
    application = application_of(body)
    name = body["metadata"]["name"]
    digest = ((body.get("status") or {}).get("externalProperties") or {}).get("projectionHash")
    for workload in facts.workloads:
        annotations = (workloads.pod_template(workload).get("metadata") or {}).get("annotations") or {}
        has = workloads.hash_annotation(name) in annotations
        selected = application is not None and workloads.selected(application, workload)
        if selected and (not has or annotations.get(workloads.hash_annotation(name)) != digest):
            return True
        if not selected and workloads.managed_by(workload, field_manager(name)):
            return True
    return False


def instance_ref(body: dict[str, Any]) -> tuple[str, str]:
    ref = (body.get("spec") or {}).get("instanceRef") or {}
    return ref.get("namespace") or body["metadata"]["namespace"], ref.get("name", "")


def secret_name(body: dict[str, Any]) -> str:
    return str((body.get("spec") or {}).get("secretName") or body["metadata"]["name"])


def next_step(facts: BindingFacts) -> Step:
    meta, status = facts.body["metadata"], facts.body.get("status") or {}
    deleting = bool(meta.get("deletionTimestamp"))
    if FINALIZER not in (meta.get("finalizers") or []):
        return Step.NOTHING if deleting else Step.ADD_FINALIZER
    if not facts.owns_ids:
        # Someone else's binding or instance id: nothing is ever sent for it, whatever the status says.
        return Step.REMOVE_FINALIZER if deleting else Step.UNRESOLVED
    if status.get("asyncOpInProgress"):
        return Step.POLL
    if status.get("orphanMitigationInProgress"):
        return Step.MITIGATE
    bound = status.get("unbindStatus") in (UnbindStatus.REQUIRED.value, UnbindStatus.FAILED.value)
    if deleting:
        if bound:
            return Step.UNBIND if facts.offering is not None else Step.UNRESOLVED
        return Step.REMOVE_FINALIZER
    if not facts.consented:  # no consent (or no instance): nothing is bound; consent withdrawn unbinds
        return Step.UNBIND if bound and facts.offering is not None else Step.UNRESOLVED
    if facts.problem is not None:
        return Step.UNRESOLVED
    if status.get("observedGeneration") == meta.get("generation"):
        settled = status.get("unbindStatus") == UnbindStatus.REQUIRED.value and status.get("secretName")
        return Step.PROJECT if settled and projection_drift(facts) else Step.NOTHING
    return Step.BIND


class BindingReconciler(ObservePlanAct[BindingFacts, Step]):
    kind: ClassVar[str] = "scbinding"

    def __init__(
        self,
        api: CatalogApi,
        memories: Memories,
        *,
        control_plane: str = DEFAULT_NAMESPACE,
        max_operation_seconds: float = 3600.0,
        writer: Callable[[str], Kube] | None = None,
    ) -> None:
        """``writer``: the door writes into a namespace go through (that namespace's ``opbroker`` account, see
        ``controller.identities``); default the controller's own (single-tenant)."""
        self.api = api
        self.writer: Callable[[str], Kube] = writer or (lambda namespace: api.kube)
        self.resolver = Resolver(api, control_plane)
        polls = osbclient.Backoff(base=1.0, maximum=30.0, max_duration=max_operation_seconds)
        self.tracking = Tracking(memories, polls)
        self.transport: Any = None
        self.clients = Clients()

    def observe(self, key: Key) -> BindingFacts | None:
        body = self.api.get(BINDINGS, key.namespace, key.name)
        if body is None:
            return None
        namespace, name = instance_ref(body)
        instance = self.api.get(INSTANCES, namespace, name)
        consented = instance is not None and tenancy.shared_with(instance, key.namespace)
        problem = self._reference_problem(body, consented)
        owns_ids = self._holds(body, BINDINGS) and (instance is None or self._holds(instance, INSTANCES))
        if problem is None and not owns_ids:
            problem = Unresolved(
                Reason.EXTERNAL_ID_IN_USE,
                "the binding's externalID, or its instance's, is held by another object: nothing is sent for it (and "
                "the Binding is deleted without an unbind); create the Binding again with another externalID, or none",
            )
        if problem is None and not bool(body["metadata"].get("deletionTimestamp")):
            live = self.api.kube.read_secret(key.namespace, secret_name(body))
            if not tenancy.may_write_secret(live, body["metadata"]["uid"]):
                problem = Unresolved(
                    Reason.SECRET_NOT_OWNED,
                    f"Secret {secret_name(body)!r} exists and was not made by this Binding (it lacks the Binding's "
                    "opbroker.io/owner-uid): it is neither overwritten nor deleted; delete it, or create the Binding "
                    "again with another secretName",
                )
        offering = parameters = None
        if instance is not None:  # also without consent: withdrawn consent unbinds what was bound
            try:
                held = (instance.get("status") or {}).get("externalProperties") or {}
                offering = self.resolver.offering(instance["spec"], held.get("planName"), held)
                if problem is None:
                    parameters = self.resolver.parameters(key.namespace, body.get("spec") or {})
                    ready = (instance.get("status") or {}).get("provisionStatus") == ProvisionStatus.PROVISIONED.value
                    if not ready or (instance.get("status") or {}).get("asyncOpInProgress"):
                        raise Unresolved(
                            Reason.ERROR_INSTANCE_NOT_READY,
                            f"instance {namespace}/{name} is not ready (provisioned, idle) yet",
                        )
            except Unresolved as exc:
                problem = problem or exc
        application = application_of(body)
        listed: tuple[dict[str, Any], ...] = ()
        if application is not None or (body.get("status") or {}).get("externalProperties", {}).get("projectionHash"):
            kinds = {(application.api_version, application.kind)} if application else set(workloads.SUPPORTED_KINDS)
            listed = tuple(
                w
                for api_version, kind in sorted(kinds)
                for w in self.api.kube.list_objects(api_version, kind, key.namespace)
            )
        return BindingFacts(key, body, instance, offering, parameters, problem, listed, consented, owns_ids)

    @staticmethod
    def _reference_problem(body: dict[str, Any], consented: bool) -> Unresolved | None:
        """Why the Binding may not use its Instance, if it may not. An Instance in another namespace that is
        missing reads the same as one not shared: a Binding learns nothing of other namespaces."""
        if consented:
            return None
        namespace, name = instance_ref(body)
        own = body["metadata"]["namespace"]
        if namespace == own:
            return Unresolved(Reason.REFERENCES_NON_EXISTENT_INSTANCE, f"instance {namespace}/{name} does not exist")
        return Unresolved(
            Reason.REFERENCE_NOT_SHARED,
            f"instance {namespace}/{name} is not shared with namespace {own!r} (or does not exist): its owner must "
            f"list {own!r} (or '*') in the Instance's spec.shareWith; nothing is sent to the broker until then",
        )

    def _holds(self, body: dict[str, Any], plural: str) -> bool:
        """Whether ``body`` holds its OSB id (a chosen id is checked against every object of its kind)."""
        return not tenancy.chosen(body) or tenancy.holds_external_id(body, self.api.list(plural))

    @staticmethod
    def plan(facts: BindingFacts) -> Sequence[Step]:
        step = next_step(facts)
        return () if step is Step.NOTHING else (step,)

    def act(self, facts: BindingFacts, actions: Sequence[Step]) -> Outcome:
        outcome = DONE
        for step in actions:
            outcome = self._do(step, facts)
        return outcome

    def _do(self, step: Step, facts: BindingFacts) -> Outcome:
        body = facts.body
        if step is Step.ADD_FINALIZER:
            self.api.set_finalizer(BINDINGS, body, present=True)
            return requeue(0)
        if step is Step.PROJECT:
            secret = self.api.kube.read_secret(body["metadata"]["namespace"], secret_name(body)) or {}
            self._project(facts, sorted((secret.get("data") or {}).keys()), withdraw=False)
            return DONE
        if step is Step.REMOVE_FINALIZER:
            self._project(facts, [], withdraw=True)
            self._release_secret(body)
            self.api.set_finalizer(BINDINGS, body, present=False)
            return DONE
        if step is Step.UNRESOLVED:
            assert facts.problem is not None
            self._status(body, ready=False, reason=facts.problem.reason, message=str(facts.problem))
            return requeue(30.0)  # the instance's changes queue the binding too
        assert facts.offering is not None
        if step is Step.POLL and (early := self.tracking.early(facts.key)) is not None:
            return early  # woken early (an event, an older re-check): not due yet
        client = self.clients.get(facts.offering.broker, self.transport)
        if step is Step.POLL:
            return self._poll(client, facts)
        if step in (Step.UNBIND, Step.MITIGATE):
            return self._unbind(client, facts)
        return self._bind(client, facts)

    def _bind(self, client: osbclient.Client, facts: BindingFacts) -> Outcome:
        body, offering, instance = facts.body, facts.offering, facts.instance
        assert offering is not None and instance is not None and facts.parameters is not None
        binding_id = tenancy.external_id(body)
        # Record first, send second: a crash in between repeats the request with the same id.
        self.api.patch_status(
            BINDINGS,
            body,
            operations.recorded(
                BindingOperation.BIND.value,
                timestamp(now()),
                externalID=binding_id,
                unbindStatus=UnbindStatus.REQUIRED.value,
                inProgressProperties={"parametersChecksum": checksum(facts.parameters)},
                conditions=conditions(body, ready=False, reason=Reason.BINDING_IN_PROGRESS, message="binding"),
            ),
        )
        try:
            result = client.bind(
                tenancy.external_id(instance),
                binding_id,
                service_id=offering.service_id,
                plan_id=offering.plan_id,
                parameters=facts.parameters,
                context={"platform": "kubernetes", "namespace": body["metadata"]["namespace"]},
                identity=identity_of(body),
            )
        except osbclient.BrokerError as exc:
            return self._decided(facts, Request.BIND, operations.refused(Request.BIND, exc))
        warn_ignored(self.api, body, result.warnings, "bind")
        if result.is_async:
            self.api.patch_status(BINDINGS, body, operations.accepted(result.operation))
            return self.tracking.accepted(facts.key)
        return self._bound(facts, result)

    def _poll(self, client: osbclient.Client, facts: BindingFacts) -> Outcome:
        body, offering, instance = facts.body, facts.offering, facts.instance
        assert offering is not None and instance is not None
        status = body.get("status") or {}
        unbinding = status.get("currentOperation") == BindingOperation.UNBIND.value
        request = Request.UNBIND if unbinding else Request.BIND
        instance_id = tenancy.external_id(instance)
        answer: osbclient.LastOperation | osbclient.BrokerError
        try:
            answer = client.binding_last_operation(
                instance_id,
                tenancy.external_id(body),
                operation=status.get("lastOperation"),
                service_id=offering.service_id,
                plan_id=offering.plan_id,
            )
        except osbclient.BrokerError as exc:
            answer = exc
        decision = operations.polled(
            request,
            answer,
            started=parse_time(status.get("operationStartTime")),
            now=now(),
            polls=self.tracking.poll(facts.key),
            backoff=pacing(self.tracking.pacing, offering),
        )
        if decision.verdict is Verdict.SUCCEEDED and request is Request.BIND:
            try:  # an asynchronous bind's credentials come with a fetch of the binding
                result = client.get_binding(
                    instance_id, tenancy.external_id(body), service_id=offering.service_id, plan_id=offering.plan_id
                )
            except osbclient.BrokerError as exc:
                return self._decided(facts, request, operations.fetched(exc))
            return self._bound(facts, result)
        return self._decided(facts, request, decision)

    def _unbind(self, client: osbclient.Client, facts: BindingFacts) -> Outcome:
        body, offering, instance = facts.body, facts.offering, facts.instance
        assert offering is not None and instance is not None
        status = body.get("status") or {}
        self.api.patch_status(
            BINDINGS,
            body,
            operations.recorded(
                BindingOperation.UNBIND.value,
                timestamp(now()),
                conditions=keeping_failed(
                    body,
                    conditions(body, ready=False, reason=Reason.UNBINDING, message="unbinding"),
                    keep=bool(status.get("orphanMitigationInProgress")) and terminal_mitigation(body),
                ),
            ),
        )
        try:
            result = client.unbind(
                tenancy.external_id(instance),
                tenancy.external_id(body),
                service_id=offering.service_id,
                plan_id=offering.plan_id,
                identity=identity_of(body),
            )
        except osbclient.BrokerError as exc:
            return self._decided(facts, Request.UNBIND, operations.refused(Request.UNBIND, exc))
        if result.is_async:
            self.api.patch_status(BINDINGS, body, operations.accepted(result.operation))
            return self.tracking.accepted(facts.key)
        return self._unbound(facts)

    # -- outcomes ------------------------------------------------------------------------------------------------

    def _bound(self, facts: BindingFacts, result: osbclient.BindingResult) -> Outcome:
        body = facts.body
        name = secret_name(body)
        unstorable = unstorable_keys(result.credentials)
        if unstorable:
            shown = ", ".join(repr(key[:64]) for key in unstorable[:5])
            message = (
                f"the broker's credentials hold key(s) a Secret cannot ({shown}: only letters, digits, '-', '_' "
                "and '.'): nothing was written"
            )
            return self._failed(facts, message, mitigate=True, reason=Reason.BIND_RESULT_REFUSED, final=True)
        data = {
            key: base64.b64encode((value if isinstance(value, str) else json.dumps(value)).encode()).decode()
            for key, value in (result.credentials or {}).items()
        }
        try:
            written = self._write_secret(body, data)
        except ApiException as exc:
            if refusals.severity(exc.status) is not refusals.Severity.PERMANENT:
                raise
            manifest = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data}
            found = refusals.refusal(exc.status, exc.body, manifest)
            message = f"the credentials cannot be stored: {found.describe()}"
            return self._failed(facts, message, mitigate=True, reason=Reason.BIND_RESULT_REFUSED, final=True)
        if not written:
            message = f"Secret {name!r} appeared meanwhile and was not made by this Binding: it is left untouched"
            return self._failed(facts, message, mitigate=True, reason=Reason.SECRET_NOT_OWNED)
        self.tracking.succeeded(facts.key)
        digest = self._project(facts, sorted(data), withdraw=False, data=data)
        status = body.get("status") or {}
        properties = {**(status.get("inProgressProperties") or {}), **({"projectionHash": digest} if digest else {})}
        stored = f"the credentials are in Secret {name!r}"
        self.api.patch_status(
            BINDINGS,
            body,
            operations.finished(
                body,
                secretName=name,
                externalProperties=properties,
                conditions=conditions(body, ready=True, reason=Reason.INJECTED_BINDING, message=stored),
            ),
        )
        self.api.kube.emit_event(body, reason=Reason.INJECTED_BINDING.value, message=f"credentials in Secret {name!r}")
        return DONE

    def _unbound(self, facts: BindingFacts) -> Outcome:
        body = facts.body
        orphan = bool((body.get("status") or {}).get("orphanMitigationInProgress"))
        final = orphan and terminal_mitigation(body)
        # Consent withdrawn from a bound Binding (not deleted, no mitigation): it waits for consent again.
        revoked = not orphan and not body["metadata"].get("deletionTimestamp") and not facts.consented
        self._project(facts, [], withdraw=True)
        self._release_secret(body)
        fields: dict[str, Any] = {"unbindStatus": UnbindStatus.SUCCEEDED.value}
        if final:
            mitigated = conditions(
                body,
                ready=False,
                reason=Reason.ORPHAN_MITIGATION_SUCCESSFUL,
                message="orphan mitigation unbound what the failed bind may have left; the binding stays failed "
                "until its spec changes",
            )
            fields["conditions"] = keeping_failed(body, mitigated, keep=True)
        if revoked and facts.problem is not None:
            fields.update(
                {
                    "observedGeneration": None,  # bound again once consent returns
                    "secretName": None,
                    "externalProperties": None,
                    "conditions": conditions(
                        body, ready=False, reason=Reason.REFERENCE_NOT_SHARED, message=str(facts.problem)
                    ),
                }
            )
        self.api.patch_status(BINDINGS, body, operations.removed(**fields))
        if body["metadata"].get("deletionTimestamp"):
            self.api.set_finalizer(BINDINGS, body, present=False)
            return DONE
        if revoked:
            self.api.kube.emit_event(
                body, reason=Reason.REFERENCE_NOT_SHARED.value, message=str(facts.problem), warning=True
            )
            return DONE  # the Instance's changes queue the Binding again
        if final:
            return DONE  # failed for good: a spec change queues it again
        return self.tracking.retry(facts.key) if orphan else DONE

    def _decided(self, facts: BindingFacts, request: Request, decision: operations.Decision) -> Outcome:
        if decision.verdict is Verdict.POLL:
            return self.tracking.schedule(facts.key, decision.delay)
        if decision.verdict is Verdict.SUCCEEDED:  # an unbind (a bind's success is fetched first)
            return self._unbound(facts)
        failure = Reason.UNBIND_CALL_FAILED if request is Request.UNBIND else Reason.BIND_CALL_FAILED
        if decision.verdict is Verdict.RETRY:
            self._status(facts.body, ready=False, reason=failure, message=f"{decision.message}; retrying")
            return self.tracking.retry(facts.key)
        reason = Reason.ASYNC_OPERATION_TIMED_OUT if decision.timed_out else failure
        if request is Request.UNBIND:  # sent again, after a pause: a deletion has no spec to change
            removal_failed(self.api, BINDINGS, facts.body, "unbindStatus", reason=reason, message=decision.message)
            return self.tracking.retry(facts.key)
        return self._failed(
            facts,
            decision.message,
            mitigate=decision.mitigate,
            reason=reason,
            final=decision.final,
            refused=decision.refused,
            answered=decision.answered,
        )

    def _failed(
        self,
        facts: BindingFacts,
        message: str,
        *,
        mitigate: bool,
        reason: Reason = Reason.BIND_CALL_FAILED,
        final: bool = False,
        refused: bool = False,
        answered: int | None = None,
    ) -> Outcome:
        """Record a failed bind. With ``mitigate``, orphan mitigation (an unbind) follows; ``final``: the
        broker's verdict (a failed or timed-out operation) stands, so the binding is marked failed now and
        stays so once mitigated, until its spec changes (a 5xx or a lost answer is retried instead).
        ``refused``: the bind request was refused for good (``answered``: the broker's status, if it sent one)."""
        body = facts.body
        if mitigate:
            return mitigation_follows(self.api, BINDINGS, body, reason=reason, message=message, final=final)
        extra: dict[str, Any] = {}
        if refused and not (body.get("status") or {}).get("externalProperties"):  # never bound before
            reason, disown = tenancy.refusal(chosen_id=tenancy.chosen(body), status=answered, failure=reason)
            if disown:  # the broker made nothing of ours under this id: deleting the Binding asks it nothing
                extra["unbindStatus"] = UnbindStatus.NOT_REQUIRED.value
            if reason is Reason.EXTERNAL_ID_IN_USE:
                message = (
                    f"{message}: the broker already has a binding {tenancy.external_id(body)!r}, which is not this "
                    "Binding's; it is never unbound from here (create the Binding again with another externalID, "
                    "or none)"
                )
        failure = conditions(body, ready=False, reason=reason, message=message, failed=True)
        self.api.patch_status(BINDINGS, body, operations.failed(body, conditions=failure, **extra))
        self.api.kube.emit_event(body, reason=reason.value, message=message, warning=True)
        return DONE

    def _project(
        self, facts: BindingFacts, keys: list[str], *, withdraw: bool, data: dict[str, str] | None = None
    ) -> str | None:
        """Project the Secret into the selected workloads and withdraw it from the others (all, with
        ``withdraw``); returns the content hash the pods carry (a new one rolls them), None without any."""
        body = facts.body
        name = body["metadata"]["name"]
        application = None if withdraw else application_of(body)
        if data is None:
            secret = self.api.kube.read_secret(body["metadata"]["namespace"], secret_name(body)) or {}
            data = secret.get("data") or {}
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
        manager = field_manager(name)
        for workload in facts.workloads:
            if application is not None and workloads.selected(application, workload):
                patch = workloads.projection(
                    workload, claim=name, secret_name=secret_name(body), keys=keys, content_hash=digest
                )
            elif workloads.managed_by(workload, manager):
                patch = workloads.unprojection(workload)
            else:
                continue
            self.writer(body["metadata"]["namespace"]).apply(patch, field_manager=manager)
        return digest if application is not None else None

    def _write_secret(self, body: dict[str, Any], data: dict[str, str]) -> bool:
        """Write the credentials Secret — created stamped with the Binding's uid, or overwritten when the live
        one carries that stamp (guarded by the version read); False, touching nothing, when it is not ours."""
        meta = body["metadata"]
        name = secret_name(body)
        door = self.writer(meta["namespace"])  # writes as the namespace's account; reads are the controller's
        live = self.api.kube.read_secret(meta["namespace"], name)
        if not tenancy.may_write_secret(live, meta["uid"]):
            return False
        manifest: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": SECRET_TYPE,
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": {"servicecatalog.k8s.io/binding": meta["name"]},
                "annotations": tenancy.stamp(meta["uid"]),
                "ownerReferences": [
                    {
                        "apiVersion": body["apiVersion"],
                        "kind": body["kind"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "data": data,
        }
        if live is None:
            return door.create(manifest) is not None  # None: one appeared meanwhile, left alone
        manifest["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]  # a change meanwhile: 409
        door.apply_secret(manifest)
        return True

    def _release_secret(self, body: dict[str, Any]) -> None:
        """Delete the credentials Secret if the live one is this Binding's (stamped with its uid), else leave it."""
        meta = body["metadata"]
        live = self.api.kube.read_secret(meta["namespace"], secret_name(body))
        if live is not None and tenancy.may_write_secret(live, meta["uid"]):
            self.writer(meta["namespace"]).delete_secret(
                meta["namespace"], secret_name(body), uid=live["metadata"]["uid"]
            )

    def _status(self, body: dict[str, Any], *, ready: bool, reason: Reason, message: str) -> None:
        say(self.api, BINDINGS, body, ready=ready, reason=reason, message=message)
