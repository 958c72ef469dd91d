"""A ServiceClaim's decisions (pure): what one reconcile of a claim does, as a list of actions.

The generic actions (:mod:`opbroker.controller.core.actions`: the claims finalizer, the status write with its
Ready condition and Event, an Event) are performed by the one executor; the claim's own effects are declared
here and performed by :mod:`opbroker.controller.claims.claiming` (taking and releasing a service, the stamped
binding Secret, the workload projections, matching again).

The rules (see :mod:`opbroker.controller.claims.claiming` for the whole story): a claim being deleted releases
exactly the services it holds, unbinds, and drops its finalizer; otherwise it is matched, the chosen service is
taken (guarded by the resourceVersion the match saw), the binding Secret written and projected, and the status
says Resolved, Pending or Invalid.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from opbroker.api.errors import field_errors
from opbroker.api.primaza import ApplicationSelector, ClaimState, RegisteredService, ServiceClaim, ServiceState
from opbroker.controller.claims import servicebinding, workloads
from opbroker.controller.claims.core import conditions, matching, names, states
from opbroker.controller.claims.core.views import ClaimView, ObjectView, OwnerRef, ServiceView, WorkloadView
from opbroker.controller.claims.settings import ClaimsSettings
from opbroker.controller.core import actions as a
from opbroker.controller.core.reasons import Reason
from opbroker.kubeclient.wire import JsonBody, JsonObject

READY = "Ready"


@dataclass(frozen=True)
class ClaimFacts:
    claim: ClaimView
    settings: ClaimsSettings
    index: matching.Index
    """The registered services the claim may look at (its namespace's, and those shared with it by the
    namespaces it names), as the watch cache has them."""
    holding: tuple[str, ...] = ()
    """Services whose (cached) ``claimedBy`` names this claim, as the claim names them (``ns/name`` when of
    another namespace)."""
    services: Mapping[str, ServiceView | None] = field(default_factory=dict)
    """Live services the claim holds or is about to hold (None: gone), by the same names."""
    secrets: Mapping[str, Mapping[str, str] | None] = field(default_factory=dict)
    """The decoded Secrets the chosen service's endpoint definition reads."""
    binding_secret: ObjectView | None = None
    """The claim's binding Secret as it exists."""
    binding_data: Mapping[str, str] | None = None
    """Its decoded data."""
    workloads: tuple[WorkloadView, ...] = ()
    """The namespace's workloads of the supported kinds."""
    now: datetime.datetime = field(kw_only=True)
    """The injected clock's wall time at observe: a flipped condition's transition time (the plan reads no
    clock)."""


# -- the claim's own actions (performed by claiming's effects) ---------------------------------------------


@dataclass(frozen=True)
class Release:
    """Free a held service: merge ``patch`` into its status guarded by the resourceVersion read (an Event
    ``Released`` on it)."""

    namespace: str
    service: str
    resource_version: str | None
    patch: JsonObject = field(repr=False)
    message: str


@dataclass(frozen=True)
class Take:
    """Write ``claimedBy`` guarded by the resourceVersion the match saw: exclusive under races (gone since the
    match: a conflict, matched again)."""

    service: str
    resource_version: str | None
    patch: JsonObject = field(repr=False)
    message: str
    namespace: str | None = None
    """The service's namespace (None: the claim's)."""


@dataclass(frozen=True)
class Rematch:
    """The chosen service is gone since the match: a conflict, so the claim is matched again."""

    service: str


@dataclass(frozen=True)
class DeleteSecret:
    """Delete the binding Secret — only the one with ``uid``, which carried the claim's stamp when read."""

    name: str
    uid: str | None = None


@dataclass(frozen=True)
class ApplySecret:
    """Write the binding Secret: create it when none was there, else rewrite the stamped one read, guarded by
    its ``resource_version``."""

    manifest: JsonObject = field(repr=False)
    resource_version: str | None = None


@dataclass(frozen=True)
class ApplyWorkloads:
    """Server-side apply the projections (and withdrawals) under the claim's field manager."""

    patches: tuple[JsonObject, ...]


ClaimAction = (
    a.EnsureFinalizer
    | a.WriteStatus
    | a.Event
    | a.Retry
    | Release
    | Take
    | Rematch
    | DeleteSecret
    | ApplySecret
    | ApplyWorkloads
)


def claim_model(claim: ClaimView) -> ServiceClaim:
    return ServiceClaim.model_validate({k: v for k, v in claim.wire.items() if k != "status"})


def service_model(service: ServiceView) -> RegisteredService:
    return RegisteredService.model_validate({k: v for k, v in service.wire.items() if k != "status"})


def predicted(claim: ClaimView, index: matching.Index, settings: ClaimsSettings) -> str | None:
    """The service :func:`plan` will choose (so observe reads it), as the claim names it."""
    if claim.meta.deleting:
        return None
    try:
        model = claim_model(claim)
    except ValidationError:
        return None
    request = matching.request_of(model, claim.registered_service)
    chosen = matching.match(request, index, settings.sla_order).chosen
    return matching.ref(request, chosen) if chosen else None


def plan(facts: ClaimFacts) -> list[ClaimAction]:
    claim = facts.claim
    if claim.meta.deleting:
        if names.FINALIZER not in claim.meta.finalizers:
            return []
        return [*_releases(facts, keep=None), *_unbind(facts), a.EnsureFinalizer(present=False)]
    actions: list[ClaimAction] = []
    if names.FINALIZER not in claim.meta.finalizers:
        actions.append(a.EnsureFinalizer())
    try:
        model = claim_model(claim)
    except ValidationError as exc:
        return [*actions, *_invalid(facts, "; ".join(field_errors(exc)))]
    application = model.spec.application
    if application is not None and not workloads.supported(application):
        kinds = ", ".join(f"{v}/{k}" for v, k in workloads.SUPPORTED_KINDS)
        message = f"application kind {application.api_version}/{application.kind} is not supported ({kinds})"
        return [*actions, *_invalid(facts, message)]
    request = matching.request_of(model, claim.registered_service)
    match = matching.match(request, facts.index, facts.settings.sla_order)
    chosen = match.chosen
    actions.extend(_releases(facts, keep=matching.ref(request, chosen) if chosen else None))
    if chosen is None:
        return [*actions, *_pending(facts, match)]
    claimant = matching.claimant(request, chosen)
    if chosen.claimed_by != claimant:
        state = states.on_claimed(chosen.state)
        actions.append(
            Take(
                chosen.name,
                chosen.resource_version,
                {"claimedBy": claimant, "state": state.value if state else None},
                f"{chosen.state.value if chosen.state else 'new'} -> Claimed: claimed by {claimant!r}",
                namespace=chosen.namespace or None,
            )
        )
    return [*actions, *_bind(facts, model, match, chosen)]


def refused(facts: ClaimFacts, refusal: a.Refusal) -> list[a.Action]:
    """A write into the claim's namespace was refused (its binding Secret, a workload's projection — as the
    namespace's ``opbroker`` account: a namespace nobody onboarded refuses them all): the status says so in place of
    whatever it said before (a ``Pending`` with the candidates of an earlier pass, when the service was not yet
    registered), with the candidates as matched now and the refusal's own reason and fix; then retried with
    backoff (onboarding the namespace or granting the right sends this claim no event)."""
    claim = facts.claim
    try:
        request = matching.request_of(claim_model(claim), claim.registered_service)
    except ValidationError:
        return [a.Retry(refusal.message)]  # the claim changed since the plan: its next pass says what it is
    match = matching.match(request, facts.index, facts.settings.sla_order)
    chosen = match.chosen
    wanted = {
        "state": (ClaimState.RESOLVED if chosen else ClaimState.PENDING).value,
        "registeredService": matching.ref(request, chosen) if chosen else None,
        "reason": refusal.message,
        "candidates": [v.as_status() for v in match.verdicts(facts.settings.candidates_shown)],
    }
    reason = Reason(refusal.shown) if refusal.shown in set(Reason) else Reason.BINDING_FAILED
    written = _write(facts, wanted, ready=False, reason=reason, message=refusal.message)
    return [*(w for w in written if isinstance(w, a.WriteStatus)), a.Retry(refusal.message)]


def _releases(facts: ClaimFacts, *, keep: str | None) -> list[ClaimAction]:
    """Release every service this claim holds except ``keep`` (normally at most one) — if, and only if, the
    service's live ``claimedBy`` names this claim."""
    claim = facts.claim
    name, namespace = claim.meta.name, claim.meta.namespace
    held = set(facts.holding)
    if claim.registered_service:
        held.add(claim.registered_service)
    actions: list[ClaimAction] = []
    for service_name in sorted(held - {keep} if keep else held):
        service = facts.services.get(service_name)
        if service is None:
            continue
        service_namespace = service.meta.namespace or namespace
        if service.claimed_by != names.qualified(namespace, name, home=service_namespace):
            continue
        current = ServiceState(service.state) if service.state else None
        state = states.on_released(current)
        actions.append(
            Release(
                service_namespace,
                service.meta.name,
                service.meta.resource_version,
                {"claimedBy": None, "state": state.value if state else None},
                f"{current.value if current else 'new'} -> {state.value if state else 'new'}: "
                f"released by claim {name!r}",
            )
        )
    return actions


def _projection(
    facts: ClaimFacts, application: ApplicationSelector | None, secret_name: str, keys: list[str], content_hash: str
) -> tuple[ApplyWorkloads, int]:
    """Project into the selected workloads, withdraw from the others; and the number projected into."""
    claim = facts.claim.meta.name
    manager = names.field_manager(claim)
    patches: list[JsonObject] = []
    projected = 0
    for workload in facts.workloads:
        if application is not None and workloads.selected(application, workload):
            patches.append(
                workloads.projection(
                    workload,
                    claim=claim,
                    secret_name=secret_name,
                    keys=keys,
                    content_hash=content_hash,
                    default_root=facts.settings.binding_root,
                )
            )
            projected += 1
        elif workloads.managed_by(workload, manager):
            patches.append(workloads.unprojection(workload))
    return ApplyWorkloads(tuple(patches)), projected


def _unbind(facts: ClaimFacts) -> list[ClaimAction]:
    """Withdraw the projection from every workload and delete the binding Secret — if it is stamped as this
    claim's own (anything else of that name is not the claim's to delete)."""
    withdraw, _ = _projection(facts, None, "", [], "")
    actions: list[ClaimAction] = [withdraw] if withdraw.patches else []
    meta, secret = facts.claim.meta, facts.binding_secret
    if secret is not None and secret.owned_by(meta.uid):
        actions.append(DeleteSecret(names.binding_secret_name(meta.name), secret.meta.uid or None))
    return actions


def _unbind_unless_done(facts: ClaimFacts) -> list[ClaimAction]:
    """Unbind, unless the status already says so (it is written only after an unbind completed)."""
    claim = facts.claim
    settled = claim.state in (ClaimState.PENDING.value, ClaimState.INVALID.value)
    return _unbind(facts) if not settled or claim.binding_secret else []


def _write(facts: ClaimFacts, wanted: JsonObject, *, ready: bool, reason: Reason, message: str) -> list[ClaimAction]:
    """The status write with its Ready condition (none when nothing changes), and an Event when the state,
    the service held or the reason changes."""
    claim = facts.claim
    old_conditions = [dict(c) for c in claim.conditions] or None
    new_conditions = conditions.with_condition(
        old_conditions,
        type_=READY,
        status="True" if ready else "False",
        reason=reason.value,
        message=message,
        generation=claim.meta.generation,
        timestamp=conditions.stamp(facts.now),
    )
    current = {
        "state": claim.state,
        "registeredService": claim.registered_service,
        "bindingSecret": claim.binding_secret,
        "reason": claim.reason,
    }
    unchanged = all(
        (current.get(k) if k in current else _candidates(claim)) == (v or None) for k, v in wanted.items()
    ) and conditions.same(old_conditions, new_conditions)
    if unchanged:
        return []
    old_reason = claim.condition_reason(READY)
    changed = (claim.state, claim.registered_service, old_reason) != (
        wanted.get("state"),
        wanted.get("registeredService"),
        reason.value,
    )
    event = a.Event(reason.value, message, warning=not ready) if changed else None
    return [a.WriteStatus({**wanted, "conditions": new_conditions}, event=event)]


def _candidates(claim: ClaimView) -> list[JsonBody] | None:
    """``status.candidates`` as read (compared whole: the verdicts are plain JSON)."""
    return [dict(c) for c in claim.candidates] or None


def _invalid(facts: ClaimFacts, message: str) -> list[ClaimAction]:
    wanted = {
        "state": ClaimState.INVALID.value,
        "registeredService": None,
        "bindingSecret": None,
        "reason": message,
        "candidates": None,
    }
    return [
        *_releases(facts, keep=None),
        *_unbind_unless_done(facts),
        *_write(facts, wanted, ready=False, reason=Reason.CLAIM_INVALID, message=message),
    ]


def _pending(facts: ClaimFacts, match: matching.Match) -> list[ClaimAction]:
    claim = facts.claim
    previous = claim.registered_service
    total = len(match.index)
    namespace = claim.meta.namespace
    looked = [namespace, *(n for n in match.request.namespaces if n not in match.unshared)]
    where = f"namespace {namespace!r}" if len(looked) == 1 else f"namespaces {', '.join(map(repr, looked))}"
    summary = (
        f"no acceptable registered service among {total} in {where}" if total else f"no registered services in {where}"
    )
    if match.unshared:
        summary += "; " + "; ".join(
            f"namespace {other!r} shares no registered service with {namespace!r}" for other in match.unshared
        )
    lost = claim.condition_reason(READY) == Reason.MATCH_LOST
    if previous:
        summary = f"registered service {previous!r} no longer matches; {summary}"
    elif lost and claim.state == ClaimState.PENDING.value:  # still Pending since the loss: keep saying so
        summary = f"{(claim.reason or '').split('; ')[0]}; {summary}"
    wanted = {
        "state": ClaimState.PENDING.value,
        "registeredService": None,
        "bindingSecret": None,
        "reason": summary,
        "candidates": [v.as_status() for v in match.verdicts(facts.settings.candidates_shown)],
    }
    reason = Reason.MATCH_LOST if previous or lost else Reason.NO_MATCH
    if match.unshared:
        reason = Reason.REFERENCE_NOT_SHARED
    return [*_unbind_unless_done(facts), *_write(facts, wanted, ready=False, reason=reason, message=summary)]


def _bind(
    facts: ClaimFacts, model: ServiceClaim, match: matching.Match, chosen: matching.Candidate
) -> list[ClaimAction]:
    claim = facts.claim
    chosen_ref = matching.ref(match.request, chosen)
    service = facts.services.get(chosen_ref)
    if service is None:
        return [Rematch(chosen_ref)]
    spec = service_model(service).spec
    resolution = servicebinding.resolve(spec.service_endpoint_definition, facts.secrets)
    held_status = {
        "state": ClaimState.RESOLVED.value,
        "registeredService": chosen_ref,
        "reason": None,
        "candidates": [v.as_status() for v in match.verdicts(facts.settings.candidates_shown)],
    }
    if not resolution.complete:
        message = f"cannot render the binding: {'; '.join(resolution.missing)}"
        # the Secret's watch event brings the claim back
        return _write(facts, held_status, ready=False, reason=Reason.BINDING_FAILED, message=message)
    service_type = chosen.service_type or ""
    provider = next((i.value for i in spec.service_class_identity if i.name == "provider"), None)
    data = servicebinding.binding_data(
        service_type=service_type,
        provider=provider,
        values=resolution.values,
        keys=model.spec.service_endpoint_definition_keys,
    )
    manifest = servicebinding.claim_binding_secret(OwnerRef.of(claim.wire), data, service_type)
    secret_name = names.binding_secret_name(claim.meta.name)
    existing = facts.binding_secret
    actions: list[ClaimAction] = []
    version: str | None = None
    if existing is not None:
        if not existing.owned_by(claim.meta.uid):
            message = (
                f"Secret {secret_name!r} exists and is not stamped as this claim's ({ANNOTATION_OWNER_UID}): "
                "left untouched; delete or rename it"
            )
            return _write(facts, held_status, ready=False, reason=Reason.OBJECT_NOT_OWNED, message=message)
        if existing.type != manifest["type"]:  # a Secret's type is immutable
            actions.append(DeleteSecret(secret_name, existing.meta.uid or None))
            existing = None
        else:
            version = existing.meta.resource_version
    actions.append(ApplySecret(manifest, version))
    content_hash = servicebinding.content_hash(data)
    project, projected = _projection(facts, model.spec.application, secret_name, sorted(data), content_hash)
    if project.patches:
        actions.append(project)
    if existing is not None and facts.binding_data != data:
        actions.append(
            a.Event(
                Reason.ROTATED.value,
                f"binding Secret {secret_name!r} re-rendered from {chosen_ref!r}; {projected} workload(s) rolled",
            )
        )
    ready = service.state in (ServiceState.CLAIMED.value, ServiceState.AVAILABLE.value)
    message = (
        f"bound to {chosen_ref!r}; projected into {projected} workload(s)"
        if ready
        else f"bound to {chosen_ref!r}, which is {service.state or 'not checked yet'}"
    )
    reason = Reason.BOUND if ready else Reason.SERVICE_NOT_READY
    return [
        *actions,
        *_write(facts, {**held_status, "bindingSecret": secret_name}, ready=ready, reason=reason, message=message),
    ]
