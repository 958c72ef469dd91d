"""Reconciling ServiceClaims: match, take exclusively, bind, project; release exactly what is held.

One reconcile:

1. a claim being deleted is *released* (finalizer): the service whose ``status.claimedBy`` names the
   claim is freed — found by that explicit reference, never by re-matching — its projection is removed
   from the workloads, the binding Secret deleted, then the finalizer;
2. the claim is matched against the namespace's registered services (:mod:`matching`, every candidate
   judged and recorded in ``status.candidates``); a service it held that no longer wins (deleted,
   changed, or the claim changed) is released first;
3. the chosen service is *taken*: ``claimedBy`` and ``state: Claimed`` are written to its status with
   the resourceVersion the match saw, so of two claims racing for it exactly one succeeds — the other
   gets a 409 and matches again;
4. the binding Secret (:mod:`servicebinding`) is rendered from the service's current endpoint values and
   applied; it is projected into the selected workloads (:mod:`workloads`) with a content hash in the pod
   template, so a changed source Secret or endpoint definition rolls the pods;
5. the claim's status says Resolved (holding ``status.registeredService``), Pending (with the reasons),
   or Invalid.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from opbroker.api.errors import field_errors
from opbroker.api.meta import ResourceRef
from opbroker.api.primaza import ApplicationSelector, ClaimState, RegisteredService, ServiceClaim, ServiceState
from opbroker.controller.claims import conditions, matching, names, servicebinding, states, workloads
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.kinds import CLAIMS, REGISTERED_SERVICES
from opbroker.controller.reasons import Reason
from opbroker.controller.reconciler import DONE, Conflict, Key, Outcome

logger = logging.getLogger(__name__)

READY = "Ready"


class ClaimReconciler:
    kind: ClassVar[str] = "claim"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def reconcile(self, key: Key) -> Outcome:
        return self.reconcile_object(key.namespace, key.name)

    def reread(self, key: Key) -> None:
        return None  # reads come from the watch cache or the API; nothing to drop

    def reconcile_object(self, namespace: str, name: str) -> Outcome:
        kube = self.ctx.kube
        claim = kube.get_custom(CLAIMS, namespace, name)
        if claim is None:
            return DONE
        meta = claim["metadata"]
        if meta.get("deletionTimestamp"):
            return self._finalize(claim)
        if names.FINALIZER not in (meta.get("finalizers") or []):
            patched = kube.patch_custom(
                CLAIMS,
                namespace,
                name,
                {
                    "metadata": {
                        "finalizers": [*(meta.get("finalizers") or []), names.FINALIZER],
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
            )
            if patched is None:
                return DONE
            claim = patched
        try:
            model = ServiceClaim.model_validate({k: v for k, v in claim.items() if k != "status"})
        except ValidationError as exc:
            return self._invalid(claim, "; ".join(field_errors(exc)))
        application = model.spec.application
        if application is not None and not workloads.supported(application):
            kinds = ", ".join(f"{v}/{k}" for v, k in workloads.SUPPORTED_KINDS)
            return self._invalid(
                claim, f"application kind {application.api_version}/{application.kind} is not supported ({kinds})"
            )
        match = matching.match(matching.request_of(model), self.ctx.store.index(namespace), self.ctx.settings.sla_order)
        chosen = match.chosen
        self._release_all(claim, keep=chosen.name if chosen else None)
        if chosen is None:
            return self._pending(claim, match)
        if chosen.claimed_by != name:
            self._take(claim, chosen)
        return self._bind(claim, model, match, chosen)

    # -- holding and releasing -----------------------------------------------------------------------

    def _take(self, claim: dict[str, Any], chosen: matching.Candidate) -> None:
        """Write ``claimedBy`` guarded by the resourceVersion the match saw: exclusive under races."""
        meta = claim["metadata"]
        snapshot = {
            "metadata": {
                "namespace": meta["namespace"],
                "name": chosen.name,
                "resourceVersion": chosen.resource_version,
            }
        }
        state = states.on_claimed(chosen.state)
        patched = self.ctx.patch_status(
            REGISTERED_SERVICES,
            snapshot,
            {"claimedBy": meta["name"], "state": state.value if state else None},
        )
        if patched is None:
            raise Conflict(chosen.name)  # deleted since the match: match again
        self.ctx.kube.emit_event(
            patched,
            reason=Reason.CLAIMED.value,
            message=f"{chosen.state.value if chosen.state else 'new'} -> Claimed: claimed by {meta['name']!r}",
        )

    def _release(self, namespace: str, service_name: str, claim_name: str) -> None:
        """Free ``service_name`` if — and only if — its ``claimedBy`` names this claim."""
        service = self.ctx.kube.get_custom(REGISTERED_SERVICES, namespace, service_name)
        status = (service or {}).get("status") or {}
        if service is None or status.get("claimedBy") != claim_name:
            return
        current = ServiceState(status["state"]) if status.get("state") else None
        state = states.on_released(current)
        patched = self.ctx.patch_status(
            REGISTERED_SERVICES, service, {"claimedBy": None, "state": state.value if state else None}
        )
        if patched is not None:
            self.ctx.kube.emit_event(
                patched,
                reason=Reason.RELEASED.value,
                message=f"{current.value if current else 'new'} -> {state.value if state else 'new'}: "
                f"released by claim {claim_name!r}",
            )

    def _release_all(self, claim: dict[str, Any], *, keep: str | None) -> None:
        """Release every service this claim holds except ``keep`` (normally at most one)."""
        meta = claim["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        held = {c.name for c in self.ctx.store.services(namespace) if c.claimed_by == name}
        recorded = (claim.get("status") or {}).get("registeredService")
        if recorded:
            held.add(recorded)
        for service in sorted(held - {keep} if keep else held):
            self._release(namespace, service, name)

    def _finalize(self, claim: dict[str, Any]) -> Outcome:
        meta = claim["metadata"]
        if names.FINALIZER not in (meta.get("finalizers") or []):
            return DONE
        self._release_all(claim, keep=None)
        self._unbind(claim)
        remaining = [f for f in meta.get("finalizers") or [] if f != names.FINALIZER]
        self.ctx.kube.patch_custom(
            CLAIMS,
            meta["namespace"],
            meta["name"],
            {"metadata": {"finalizers": remaining, "resourceVersion": meta["resourceVersion"]}},
        )
        return DONE

    # -- outcomes ------------------------------------------------------------------------------------

    def _unbind_unless_done(self, claim: dict[str, Any]) -> None:
        """Unbind, unless the status already says so (it is written only after an unbind completed)."""
        status = claim.get("status") or {}
        settled = status.get("state") in (ClaimState.PENDING.value, ClaimState.INVALID.value)
        if not settled or status.get("bindingSecret"):
            self._unbind(claim)

    def _invalid(self, claim: dict[str, Any], message: str) -> Outcome:
        self._release_all(claim, keep=None)
        self._unbind_unless_done(claim)
        self._write(
            claim,
            {
                "state": ClaimState.INVALID.value,
                "registeredService": None,
                "bindingSecret": None,
                "reason": message,
                "candidates": None,
            },
            ready=False,
            reason=Reason.CLAIM_INVALID,
            message=message,
        )
        return DONE

    def _pending(self, claim: dict[str, Any], match: matching.Match) -> Outcome:
        self._unbind_unless_done(claim)
        status = claim.get("status") or {}
        previous = status.get("registeredService")
        total = len(match.index)
        summary = (
            f"no acceptable registered service among {total} in namespace {claim['metadata']['namespace']!r}"
            if total
            else f"no registered services in namespace {claim['metadata']['namespace']!r}"
        )
        lost = (conditions.find(status.get("conditions"), READY) or {}).get("reason") == Reason.MATCH_LOST
        if previous:
            summary = f"registered service {previous!r} no longer matches; {summary}"
        elif lost and status.get("state") == ClaimState.PENDING.value:  # still Pending since the loss: keep saying so
            summary = f"{str(status.get('reason') or '').split('; ')[0]}; {summary}"
        self._write(
            claim,
            {
                "state": ClaimState.PENDING.value,
                "registeredService": None,
                "bindingSecret": None,
                "reason": summary,
                "candidates": [v.as_status() for v in match.verdicts(self.ctx.settings.candidates_shown)],
            },
            ready=False,
            reason=Reason.MATCH_LOST if previous or lost else Reason.NO_MATCH,
            message=summary,
        )
        return DONE

    def _bind(
        self, claim: dict[str, Any], model: ServiceClaim, match: matching.Match, chosen: matching.Candidate
    ) -> Outcome:
        kube = self.ctx.kube
        meta = claim["metadata"]
        namespace = meta["namespace"]
        service = kube.get_custom(REGISTERED_SERVICES, namespace, chosen.name)
        if service is None:
            raise Conflict(chosen.name)
        spec = RegisteredService.model_validate({k: v for k, v in service.items() if k != "status"}).spec
        definition = spec.service_endpoint_definition
        secrets = {
            secret: servicebinding.decode(kube.read_secret(namespace, secret))
            for secret in sorted(servicebinding.referenced_secrets(definition))
        }
        resolution = servicebinding.resolve(definition, secrets)
        held_status = {
            "state": ClaimState.RESOLVED.value,
            "registeredService": chosen.name,
            "reason": None,
            "candidates": [v.as_status() for v in match.verdicts(self.ctx.settings.candidates_shown)],
        }
        if not resolution.complete:
            message = f"cannot render the binding: {'; '.join(resolution.missing)}"
            self._write(claim, held_status, ready=False, reason=Reason.BINDING_FAILED, message=message)
            return DONE  # the Secret's watch event brings the claim back
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
        existing = kube.read_secret(namespace, secret_name)
        if existing is not None:
            owners = {ref.get("uid") for ref in (existing.get("metadata") or {}).get("ownerReferences") or []}
            if meta["uid"] not in owners:
                message = f"Secret {secret_name!r} exists and does not belong to this claim"
                self._write(claim, held_status, ready=False, reason=Reason.BINDING_FAILED, message=message)
                return DONE
            if existing.get("type") != manifest["type"]:  # a Secret's type is immutable
                kube.delete(ResourceRef(api_version="v1", kind="Secret", name=secret_name, namespace=namespace))
                existing = None
        kube.apply_secret(manifest)
        content_hash = servicebinding.content_hash(data)
        projected = self._project(claim, model.spec.application, secret_name, sorted(data), content_hash)
        if existing is not None and servicebinding.decode(existing) != data:
            kube.emit_event(
                claim,
                reason=Reason.ROTATED.value,
                message=f"binding Secret {secret_name!r} re-rendered from {chosen.name!r}; "
                f"{projected} workload(s) rolled",
            )
        service_state = (service.get("status") or {}).get("state")
        ready = service_state in (ServiceState.CLAIMED.value, ServiceState.AVAILABLE.value)
        message = (
            f"bound to {chosen.name!r}; projected into {projected} workload(s)"
            if ready
            else f"bound to {chosen.name!r}, which is {service_state or 'not checked yet'}"
        )
        self._write(
            claim,
            {**held_status, "bindingSecret": secret_name},
            ready=ready,
            reason=Reason.BOUND if ready else Reason.SERVICE_NOT_READY,
            message=message,
        )
        return DONE

    # -- binding secret and projection ---------------------------------------------------------------

    def _project(
        self,
        claim: dict[str, Any],
        application: ApplicationSelector | None,
        secret_name: str,
        keys: list[str],
        content_hash: str,
    ) -> int:
        """Project into the selected workloads, withdraw from the others; the number projected into."""
        kube = self.ctx.kube
        meta = claim["metadata"]
        manager = names.field_manager(meta["name"])
        projected = 0
        for api_version, kind in workloads.SUPPORTED_KINDS:
            for workload in kube.list_objects(api_version, kind, meta["namespace"]):
                if application is not None and workloads.selected(application, workload):
                    patch = workloads.projection(
                        workload,
                        claim=meta["name"],
                        secret_name=secret_name,
                        keys=keys,
                        content_hash=content_hash,
                        default_root=self.ctx.settings.binding_root,
                    )
                    kube.apply(patch, field_manager=manager)
                    projected += 1
                elif workloads.managed_by(workload, manager):
                    kube.apply(workloads.unprojection(workload), field_manager=manager)
        return projected

    def _unbind(self, claim: dict[str, Any]) -> None:
        """Withdraw the projection from every workload and delete the binding Secret."""
        self._project(claim, None, "", [], "")
        meta = claim["metadata"]
        name = names.binding_secret_name(meta["name"])
        existing = self.ctx.kube.read_secret(meta["namespace"], name)
        owners = {ref.get("uid") for ref in ((existing or {}).get("metadata") or {}).get("ownerReferences") or []}
        if existing is not None and meta["uid"] in owners:
            try:
                self.ctx.kube.delete(
                    ResourceRef(api_version="v1", kind="Secret", name=name, namespace=meta["namespace"])
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise

    # -- status --------------------------------------------------------------------------------------

    def _write(
        self, claim: dict[str, Any], wanted: dict[str, Any], *, ready: bool, reason: Reason, message: str
    ) -> None:
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
            return
        patched = self.ctx.patch_status(CLAIMS, claim, {**wanted, "conditions": new_conditions})
        if patched is None:
            return
        old_ready = conditions.find(status.get("conditions"), READY) or {}
        before = (status.get("state"), status.get("registeredService"), old_ready.get("reason"))
        if before != (wanted.get("state"), wanted.get("registeredService"), reason.value):
            self.ctx.kube.emit_event(patched, reason=reason.value, message=message, warning=not ready)
        claim.clear()
        claim.update(patched)
