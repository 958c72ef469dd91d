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
the namespace's workloads; :meth:`ClaimReconciler.plan` (pure) decides all of the above with :mod:`matching`,
:mod:`states`, :mod:`servicebinding` and :mod:`workloads`; act writes, in order.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import ValidationError

from opbroker.api.conventions import ANNOTATION_OWNER_UID, owned_by
from opbroker.api.errors import field_errors
from opbroker.api.primaza import ClaimState, RegisteredService, ServiceClaim, ServiceState
from opbroker.controller.claims import servicebinding, workloads
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.core import conditions, matching, names, states
from opbroker.controller.claims.kinds import CLAIMS, REGISTERED_SERVICES
from opbroker.controller.claims.settings import ClaimsSettings
from opbroker.controller.core.reasons import Reason
from opbroker.controller.reconciler import DONE, Conflict, Key, ObservePlanAct, Outcome

logger = logging.getLogger(__name__)

READY = "Ready"


@dataclass(frozen=True)
class ClaimFacts:
    claim: dict[str, Any]
    settings: ClaimsSettings
    index: matching.Index
    """The registered services the claim may look at (its namespace's, and those shared with it by the
    namespaces it names), as the watch cache has them."""
    holding: tuple[str, ...] = ()
    """Services whose (cached) ``claimedBy`` names this claim, as the claim names them (``ns/name`` when of
    another namespace)."""
    services: Mapping[str, dict[str, Any] | None] = field(default_factory=dict)
    """Live bodies of the services the claim holds or is about to hold (None: gone), by the same names."""
    secrets: Mapping[str, dict[str, str] | None] = field(default_factory=dict)
    """The decoded Secrets the chosen service's endpoint definition reads."""
    binding_secret: dict[str, Any] | None = None
    """The claim's binding Secret as it exists."""
    workloads: tuple[dict[str, Any], ...] = ()
    """The namespace's workloads of the supported kinds."""


@dataclass(frozen=True)
class AddFinalizer:
    finalizers: tuple[str, ...]


@dataclass(frozen=True)
class RemoveFinalizer:
    finalizers: tuple[str, ...]


@dataclass(frozen=True)
class Release:
    """Free a held service (its status, guarded by the resourceVersion read)."""

    service: dict[str, Any]
    patch: dict[str, Any]
    message: str


@dataclass(frozen=True)
class Take:
    """Write ``claimedBy`` guarded by the resourceVersion the match saw: exclusive under races."""

    service: str
    resource_version: str | None
    patch: dict[str, Any]
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
    its ``resource_version`` (:meth:`Context.write_secret`)."""

    manifest: dict[str, Any]
    resource_version: str | None = None


@dataclass(frozen=True)
class ApplyWorkloads:
    """Server-side apply the projections (and withdrawals) under the claim's field manager."""

    patches: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class EmitEvent:
    reason: Reason
    message: str
    warning: bool = False


@dataclass(frozen=True)
class WriteStatus:
    patch: dict[str, Any]
    event: EmitEvent | None
    """Emitted on the patched claim when the status was written."""


ClaimAction = (
    AddFinalizer
    | RemoveFinalizer
    | Release
    | Take
    | Rematch
    | DeleteSecret
    | ApplySecret
    | ApplyWorkloads
    | EmitEvent
    | WriteStatus
)


def _model(claim: dict[str, Any]) -> ServiceClaim:
    return ServiceClaim.model_validate({k: v for k, v in claim.items() if k != "status"})


class ClaimReconciler(ObservePlanAct[ClaimFacts, ClaimAction]):
    kind: ClassVar[str] = "claim"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    # -- observe -------------------------------------------------------------------------------------

    def observe(self, key: Key) -> ClaimFacts | None:
        kube, store = self.ctx.kube, self.ctx.store
        _, namespace, name = key
        claim = kube.get_custom(CLAIMS, namespace, name)
        if claim is None:
            return None
        recorded = (claim.get("status") or {}).get("registeredService")
        looks_in = tuple(
            n for n in dict.fromkeys((claim.get("spec") or {}).get("serviceNamespaces") or ()) if isinstance(n, str)
        )
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
        chosen = self._predicted(claim, index)
        if chosen is not None:
            wanted.add(chosen)
        services = {
            service: kube.get_custom(REGISTERED_SERVICES, *names.parse_ref(service, home=namespace))
            for service in sorted(wanted)
        }
        secrets: dict[str, dict[str, str] | None] = {}
        body = services.get(chosen) if chosen is not None else None
        if body is not None:
            # The endpoint Secrets are read in the service's own namespace, never the claim's.
            home = body["metadata"]["namespace"]
            definition = self._service_model(body).spec.service_endpoint_definition
            secrets = {
                secret: servicebinding.decode(kube.read_secret(home, secret))
                for secret in sorted(servicebinding.referenced_secrets(definition))
            }
        listed = tuple(
            workload
            for api_version, kind in workloads.SUPPORTED_KINDS
            for workload in kube.list_objects(api_version, kind, namespace)
        )
        return ClaimFacts(
            claim=claim,
            settings=self.ctx.settings,
            index=index,
            holding=holding,
            services=services,
            secrets=secrets,
            binding_secret=kube.read_secret(namespace, names.binding_secret_name(name)),
            workloads=listed,
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

    def _predicted(self, claim: dict[str, Any], index: matching.Index) -> str | None:
        """The service plan will choose (to read it), as the claim names it: the same pure match plan makes."""
        if claim["metadata"].get("deletionTimestamp"):
            return None
        try:
            model = _model(claim)
        except ValidationError:
            return None
        request = matching.request_of(model, (claim.get("status") or {}).get("registeredService"))
        chosen = matching.match(request, index, self.ctx.settings.sla_order).chosen
        return matching.ref(request, chosen) if chosen else None

    @staticmethod
    def _service_model(body: dict[str, Any]) -> RegisteredService:
        return RegisteredService.model_validate({k: v for k, v in body.items() if k != "status"})

    # -- plan ----------------------------------------------------------------------------------------

    @staticmethod
    def plan(facts: ClaimFacts) -> Sequence[ClaimAction]:
        claim = facts.claim
        meta = claim["metadata"]
        finalizers = tuple(meta.get("finalizers") or [])
        if meta.get("deletionTimestamp"):
            if names.FINALIZER not in finalizers:
                return ()
            return (
                *_releases(facts, keep=None),
                *_unbind(facts),
                RemoveFinalizer(tuple(f for f in finalizers if f != names.FINALIZER)),
            )
        actions: list[ClaimAction] = []
        if names.FINALIZER not in finalizers:
            actions.append(AddFinalizer((*finalizers, names.FINALIZER)))
        try:
            model = _model(claim)
        except ValidationError as exc:
            return [*actions, *_invalid(facts, "; ".join(field_errors(exc)))]
        application = model.spec.application
        if application is not None and not workloads.supported(application):
            kinds = ", ".join(f"{v}/{k}" for v, k in workloads.SUPPORTED_KINDS)
            message = f"application kind {application.api_version}/{application.kind} is not supported ({kinds})"
            return [*actions, *_invalid(facts, message)]
        request = matching.request_of(model, (claim.get("status") or {}).get("registeredService"))
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

    # -- act -----------------------------------------------------------------------------------------

    def act(self, facts: ClaimFacts, actions: Sequence[ClaimAction]) -> Outcome:
        kube = self.ctx.kube
        claim = facts.claim
        meta = claim["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        for action in actions:
            if isinstance(action, AddFinalizer | RemoveFinalizer):
                patched = kube.patch_custom(
                    CLAIMS,
                    namespace,
                    name,
                    {
                        "metadata": {
                            "finalizers": list(action.finalizers),
                            "resourceVersion": claim["metadata"]["resourceVersion"],
                        }
                    },
                )
                if patched is None:
                    return DONE
                claim = patched
            elif isinstance(action, Release):
                released = self.ctx.patch_status(REGISTERED_SERVICES, action.service, action.patch)
                if released is not None:
                    kube.emit_event(released, reason=Reason.RELEASED.value, message=action.message)
            elif isinstance(action, Take):
                snapshot = {
                    "metadata": {
                        "namespace": action.namespace or namespace,
                        "name": action.service,
                        "resourceVersion": action.resource_version,
                    }
                }
                taken = self.ctx.patch_status(REGISTERED_SERVICES, snapshot, action.patch)
                if taken is None:
                    raise Conflict(action.service)  # deleted since the match: match again
                kube.emit_event(taken, reason=Reason.CLAIMED.value, message=action.message)
            elif isinstance(action, Rematch):
                raise Conflict(action.service)
            elif isinstance(action, DeleteSecret):
                self.ctx.door(namespace).delete_secret(namespace, action.name, uid=action.uid)
            elif isinstance(action, ApplySecret):
                self.ctx.write_secret(action.manifest, action.resource_version)
            elif isinstance(action, ApplyWorkloads):
                for patch in action.patches:
                    self.ctx.door(namespace).apply(patch, field_manager=names.field_manager(name))
            elif isinstance(action, EmitEvent):
                kube.emit_event(claim, reason=action.reason.value, message=action.message, warning=action.warning)
            else:
                written = self.ctx.patch_status(CLAIMS, claim, action.patch)
                if written is None:
                    continue
                if action.event is not None:
                    event = action.event
                    kube.emit_event(written, reason=event.reason.value, message=event.message, warning=event.warning)
                claim = written
        return DONE


# -- the plan's parts (pure) -----------------------------------------------------------------------------


def _releases(facts: ClaimFacts, *, keep: str | None) -> list[ClaimAction]:
    """Release every service this claim holds except ``keep`` (normally at most one) — if, and only if, the
    service's live ``claimedBy`` names this claim."""
    claim = facts.claim
    name, namespace = claim["metadata"]["name"], claim["metadata"]["namespace"]
    held = set(facts.holding)
    recorded = (claim.get("status") or {}).get("registeredService")
    if recorded:
        held.add(recorded)
    actions: list[ClaimAction] = []
    for service_name in sorted(held - {keep} if keep else held):
        service = facts.services.get(service_name)
        status = (service or {}).get("status") or {}
        if service is None:
            continue
        service_namespace = (service.get("metadata") or {}).get("namespace") or namespace
        if status.get("claimedBy") != names.qualified(namespace, name, home=service_namespace):
            continue
        current = ServiceState(status["state"]) if status.get("state") else None
        state = states.on_released(current)
        actions.append(
            Release(
                service,
                {"claimedBy": None, "state": state.value if state else None},
                f"{current.value if current else 'new'} -> {state.value if state else 'new'}: "
                f"released by claim {name!r}",
            )
        )
    return actions


def _projection(
    facts: ClaimFacts, application: Any, secret_name: str, keys: list[str], content_hash: str
) -> tuple[ApplyWorkloads, int]:
    """Project into the selected workloads, withdraw from the others; and the number projected into."""
    claim = facts.claim["metadata"]["name"]
    manager = names.field_manager(claim)
    patches: list[dict[str, Any]] = []
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


def _secret_uid(secret: dict[str, Any]) -> str | None:
    uid: str | None = (secret.get("metadata") or {}).get("uid")
    return uid


def _unbind(facts: ClaimFacts) -> list[ClaimAction]:
    """Withdraw the projection from every workload and delete the binding Secret — if it is stamped as this
    claim's own (anything else of that name is not the claim's to delete)."""
    withdraw, _ = _projection(facts, None, "", [], "")
    actions: list[ClaimAction] = [withdraw] if withdraw.patches else []
    meta = facts.claim["metadata"]
    if facts.binding_secret is not None and owned_by(facts.binding_secret, meta["uid"]):
        actions.append(DeleteSecret(names.binding_secret_name(meta["name"]), _secret_uid(facts.binding_secret)))
    return actions


def _unbind_unless_done(facts: ClaimFacts) -> list[ClaimAction]:
    """Unbind, unless the status already says so (it is written only after an unbind completed)."""
    status = facts.claim.get("status") or {}
    settled = status.get("state") in (ClaimState.PENDING.value, ClaimState.INVALID.value)
    return _unbind(facts) if not settled or status.get("bindingSecret") else []


def _write(
    claim: dict[str, Any], wanted: dict[str, Any], *, ready: bool, reason: Reason, message: str
) -> list[ClaimAction]:
    status: dict[str, Any] = claim.get("status") or {}
    new_conditions = conditions.with_condition(
        status.get("conditions"),
        type_=READY,
        status="True" if ready else "False",
        reason=reason.value,
        message=message,
        generation=claim["metadata"].get("generation"),
    )
    unchanged = all((status.get(k) or None) == (v or None) for k, v in wanted.items()) and conditions.same(
        status.get("conditions"), new_conditions
    )
    if unchanged:
        return []
    old_ready = conditions.find(status.get("conditions"), READY) or {}
    before = (status.get("state"), status.get("registeredService"), old_ready.get("reason"))
    changed = before != (wanted.get("state"), wanted.get("registeredService"), reason.value)
    event = EmitEvent(reason, message, warning=not ready) if changed else None
    return [WriteStatus({**wanted, "conditions": new_conditions}, event)]


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
        *_write(facts.claim, wanted, ready=False, reason=Reason.CLAIM_INVALID, message=message),
    ]


def _pending(facts: ClaimFacts, match: matching.Match) -> list[ClaimAction]:
    claim = facts.claim
    status = claim.get("status") or {}
    previous = status.get("registeredService")
    total = len(match.index)
    namespace = claim["metadata"]["namespace"]
    looked = [namespace, *(n for n in match.request.namespaces if n not in match.unshared)]
    where = f"namespace {namespace!r}" if len(looked) == 1 else f"namespaces {', '.join(map(repr, looked))}"
    summary = (
        f"no acceptable registered service among {total} in {where}" if total else f"no registered services in {where}"
    )
    if match.unshared:
        summary += "; " + "; ".join(
            f"namespace {other!r} shares no registered service with {namespace!r}" for other in match.unshared
        )
    lost = (conditions.find(status.get("conditions"), READY) or {}).get("reason") == Reason.MATCH_LOST
    if previous:
        summary = f"registered service {previous!r} no longer matches; {summary}"
    elif lost and status.get("state") == ClaimState.PENDING.value:  # still Pending since the loss: keep saying so
        summary = f"{str(status.get('reason') or '').split('; ')[0]}; {summary}"
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
    return [*_unbind_unless_done(facts), *_write(claim, wanted, ready=False, reason=reason, message=summary)]


def _bind(
    facts: ClaimFacts, model: ServiceClaim, match: matching.Match, chosen: matching.Candidate
) -> list[ClaimAction]:
    claim = facts.claim
    meta = claim["metadata"]
    chosen_ref = matching.ref(match.request, chosen)
    service = facts.services.get(chosen_ref)
    if service is None:
        return [Rematch(chosen_ref)]
    spec = ClaimReconciler._service_model(service).spec
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
        return _write(claim, held_status, ready=False, reason=Reason.BINDING_FAILED, message=message)
    service_type = chosen.service_type or ""
    provider = next((i.value for i in spec.service_class_identity if i.name == "provider"), None)
    data = servicebinding.binding_data(
        service_type=service_type,
        provider=provider,
        values=resolution.values,
        keys=model.spec.service_endpoint_definition_keys,
    )
    manifest = servicebinding.claim_binding_secret(claim, data, service_type)
    secret_name = manifest["metadata"]["name"]
    existing = facts.binding_secret
    actions: list[ClaimAction] = []
    version: str | None = None
    if existing is not None:
        if not owned_by(existing, meta["uid"]):
            message = (
                f"Secret {secret_name!r} exists and is not stamped as this claim's ({ANNOTATION_OWNER_UID}): "
                "left untouched; delete or rename it"
            )
            return _write(claim, held_status, ready=False, reason=Reason.OBJECT_NOT_OWNED, message=message)
        if existing.get("type") != manifest["type"]:  # a Secret's type is immutable
            actions.append(DeleteSecret(secret_name, _secret_uid(existing)))
            existing = None
        else:
            version = (existing.get("metadata") or {}).get("resourceVersion")
    actions.append(ApplySecret(manifest, version))
    content_hash = servicebinding.content_hash(data)
    project, projected = _projection(facts, model.spec.application, secret_name, sorted(data), content_hash)
    if project.patches:
        actions.append(project)
    if existing is not None and servicebinding.decode(existing) != data:
        actions.append(
            EmitEvent(
                Reason.ROTATED,
                f"binding Secret {secret_name!r} re-rendered from {chosen_ref!r}; {projected} workload(s) rolled",
            )
        )
    service_state = (service.get("status") or {}).get("state")
    ready = service_state in (ServiceState.CLAIMED.value, ServiceState.AVAILABLE.value)
    message = (
        f"bound to {chosen_ref!r}; projected into {projected} workload(s)"
        if ready
        else f"bound to {chosen_ref!r}, which is {service_state or 'not checked yet'}"
    )
    reason = Reason.BOUND if ready else Reason.SERVICE_NOT_READY
    return [
        *actions,
        *_write(claim, {**held_status, "bindingSecret": secret_name}, ready=ready, reason=reason, message=message),
    ]
