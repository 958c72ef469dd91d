"""Reconciling automatic registrations: an opted-in broker binding becomes a RegisteredService.

See :mod:`registration` for the rules. The generated objects are stamped with the binding's uid
(``opbroker.io/owner-uid``); one of those names without the stamp is never written or deleted (event
``ObjectNotOwned`` or ``RegistrationConflict``). Triggered by the binding's events and by its credentials
Secret's; the generated objects are applied (server-side) on every change, and removed as soon as the
binding is being deleted or opts out.

observe reads the binding, the generated service, the binding's catalog entries and (once the binding has
succeeded) its credentials; plan (pure) calls :mod:`registration`; act writes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import ValidationError

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.api.primaza import RegisteredService
from opbroker.controller.claims import servicebinding
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.core import names, registration
from opbroker.controller.claims.kinds import REGISTERED_SERVICES
from opbroker.controller.core.reasons import Reason
from opbroker.controller.kube import BINDINGS
from opbroker.controller.reconciler import DONE, Key, ObservePlanAct, Outcome

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegistrationFacts:
    key: Key
    binding: dict[str, Any] | None
    generated: dict[str, Any] | None
    """The RegisteredService named after the binding, whoever made it."""
    plan: dict[str, Any] | None = None
    """The binding's SFPlan (catalog entry body)."""
    service: dict[str, Any] | None = None
    """The binding's SFService (catalog entry body)."""
    credentials: dict[str, str] | None = None
    """The decoded credentials Secret (read only once the binding has succeeded)."""
    endpoint_secret: dict[str, Any] | None = None
    """The Secret named like the generated endpoint Secret, whoever made it."""


@dataclass(frozen=True)
class TrackCredentials:
    secret: str | None


@dataclass(frozen=True)
class RemoveGenerated:
    """Delete the generated RegisteredService (``service``) and endpoint Secret (the one with ``secret_uid``):
    each only when stamped as the binding's."""

    service: bool = True
    secret_uid: str | None = None


@dataclass(frozen=True)
class Register:
    endpoint_secret: dict[str, Any]
    manifest: dict[str, Any]
    secret_version: str | None = None
    """The resourceVersion of the stamped endpoint Secret read; None: there was none (create it)."""


@dataclass(frozen=True)
class EmitEvent:
    reason: Reason
    message: str
    warning: bool = False


RegistrationAction = TrackCredentials | RemoveGenerated | Register | EmitEvent


def credentials_secret(binding: dict[str, Any]) -> str | None:
    secret: str | None = (((binding.get("status") or {}).get("response")) or {}).get("secretRef")
    return secret


def deleting(binding: dict[str, Any]) -> bool:
    return bool(binding["metadata"].get("deletionTimestamp"))


def succeeded(binding: dict[str, Any]) -> bool:
    return (binding.get("status") or {}).get("state") == OperationState.SUCCEEDED.value


class RegistrationReconciler(ObservePlanAct[RegistrationFacts, RegistrationAction]):
    kind: ClassVar[str] = "registration"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def plan_of(self, binding: dict[str, Any]) -> dict[str, Any] | None:
        entry = self.ctx.osb_catalog.plan((binding.get("spec") or {}).get("planId", ""))
        return entry.body if entry else None

    def wanted(self, binding: dict[str, Any]) -> bool:
        return registration.opted_in(binding, self.plan_of(binding))

    def observe(self, key: Key) -> RegistrationFacts:
        kube = self.ctx.kube
        binding = kube.get_custom(BINDINGS, key.namespace, key.name)
        generated = kube.get_custom(REGISTERED_SERVICES, key.namespace, key.name)
        endpoint = kube.read_secret(key.namespace, names.endpoint_secret_name(key.name))
        if binding is None:
            return RegistrationFacts(key, None, generated, endpoint_secret=endpoint)
        service = self.ctx.osb_catalog.service((binding.get("spec") or {}).get("serviceId", ""))
        secret = credentials_secret(binding)
        credentials = None
        if secret and succeeded(binding) and not deleting(binding):
            credentials = servicebinding.decode(kube.read_secret(key.namespace, secret))
        return RegistrationFacts(
            key,
            binding,
            generated,
            self.plan_of(binding),
            service.body if service else None,
            credentials,
            endpoint_secret=endpoint,
        )

    @staticmethod
    def plan(facts: RegistrationFacts) -> Sequence[RegistrationAction]:
        binding, generated, name = facts.binding, facts.generated, facts.key.name
        uid = binding["metadata"].get("uid") if binding is not None else None
        endpoint = facts.endpoint_secret
        if binding is None or deleting(binding) or not registration.opted_in(binding, facts.plan):
            ours = registration.generated_by(generated, name, uid)
            secret_ours = registration.generated_by(endpoint, name, uid)
            if ours or secret_ours:
                secret_uid = (endpoint or {}).get("metadata", {}).get("uid") if secret_ours else None
                return (TrackCredentials(None), RemoveGenerated(service=ours, secret_uid=secret_uid))
            return (TrackCredentials(None),)
        secret = credentials_secret(binding)
        track = TrackCredentials(secret)
        if not succeeded(binding) or not secret:
            return (track,)  # the binding's next events bring it back
        credentials = registration.credentials_of(facts.credentials)
        if credentials is None:
            return (track,)  # the credentials Secret's events bring it back
        flat = registration.flatten(credentials)
        if generated is not None and not registration.generated_by(generated, name, uid):
            message = f"a RegisteredService {name!r} not generated from this binding exists; not registering"
            return (track, EmitEvent(Reason.REGISTRATION_CONFLICT, message, warning=True))
        secret_name = names.endpoint_secret_name(name)
        if endpoint is not None and not registration.generated_by(endpoint, name, uid):
            message = (
                f"a Secret {secret_name!r} not stamped as this binding's ({ANNOTATION_OWNER_UID}) exists: "
                "left untouched; not registering"
            )
            return (track, EmitEvent(Reason.OBJECT_NOT_OWNED, message, warning=True))
        try:
            manifest = registration.registered_service(binding, list(flat), service=facts.service, plan=facts.plan)
        except ValidationError as exc:
            message = f"cannot register: {exc.error_count()} problem(s) with the generated RegisteredService"
            return (track, EmitEvent(Reason.REGISTRATION_CONFLICT, message, warning=True))
        register = Register(
            registration.endpoint_secret(binding, flat),
            manifest,
            secret_version=(endpoint or {}).get("metadata", {}).get("resourceVersion"),
        )
        actions: list[RegistrationAction] = [track, register]
        if generated is None:
            message = f"registered as RegisteredService {name!r} with endpoint keys {', '.join(flat)}"
            actions.append(EmitEvent(Reason.SERVICE_REGISTERED, message))
        return actions

    def act(self, facts: RegistrationFacts, actions: Sequence[RegistrationAction]) -> Outcome:
        kube, (_, namespace, name) = self.ctx.kube, facts.key
        for action in actions:
            if isinstance(action, TrackCredentials):
                self.ctx.store.track_credentials(namespace, action.secret, name)
            elif isinstance(action, RemoveGenerated):
                self._remove(namespace, name, action)
            elif isinstance(action, Register):
                self.ctx.write_secret(action.endpoint_secret, action.secret_version)
                kube.apply(action.manifest)
            else:
                assert facts.binding is not None
                kube.emit_event(
                    facts.binding, reason=action.reason.value, message=action.message, warning=action.warning
                )
        return DONE

    def _remove(self, namespace: str, name: str, action: RemoveGenerated) -> None:
        kube = self.ctx.kube
        if action.service:
            kube.delete(
                ResourceRef(
                    api_version=RegisteredService.api_version_string(),
                    kind=RegisteredService.KIND,
                    name=name,
                    namespace=namespace,
                )
            )
        if action.secret_uid is not None:
            self.ctx.door(namespace).delete_secret(namespace, names.endpoint_secret_name(name), uid=action.secret_uid)
