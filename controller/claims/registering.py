"""Reconciling automatic registrations: an opted-in broker binding becomes a RegisteredService.

See :mod:`registration` for the rules. Triggered by the binding's events and by its credentials
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

from opbroker.api.meta import ResourceRef
from opbroker.api.osb import OperationState
from opbroker.api.primaza import RegisteredService
from opbroker.controller.claims import names, registration, servicebinding
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.kinds import REGISTERED_SERVICES
from opbroker.controller.kube import BINDINGS
from opbroker.controller.reasons import Reason
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


@dataclass(frozen=True)
class TrackCredentials:
    secret: str | None


@dataclass(frozen=True)
class RemoveGenerated:
    pass


@dataclass(frozen=True)
class Register:
    endpoint_secret: dict[str, Any]
    manifest: dict[str, Any]


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
        if binding is None:
            return RegistrationFacts(key, None, generated)
        service = self.ctx.osb_catalog.service((binding.get("spec") or {}).get("serviceId", ""))
        secret = credentials_secret(binding)
        credentials = None
        if secret and succeeded(binding) and not deleting(binding):
            credentials = servicebinding.decode(kube.read_secret(key.namespace, secret))
        return RegistrationFacts(
            key, binding, generated, self.plan_of(binding), service.body if service else None, credentials
        )

    @staticmethod
    def plan(facts: RegistrationFacts) -> Sequence[RegistrationAction]:
        binding, generated, name = facts.binding, facts.generated, facts.key.name
        if binding is None or deleting(binding) or not registration.opted_in(binding, facts.plan):
            if generated is not None and registration.generated_by(generated, name):
                return (TrackCredentials(None), RemoveGenerated())
            return (TrackCredentials(None),)
        secret = credentials_secret(binding)
        track = TrackCredentials(secret)
        if not succeeded(binding) or not secret:
            return (track,)  # the binding's next events bring it back
        credentials = registration.credentials_of(facts.credentials)
        if credentials is None:
            return (track,)  # the credentials Secret's events bring it back
        flat = registration.flatten(credentials)
        if generated is not None and not registration.generated_by(generated, name):
            message = f"a RegisteredService {name!r} not generated from this binding exists; not registering"
            return (track, EmitEvent(Reason.REGISTRATION_CONFLICT, message, warning=True))
        try:
            manifest = registration.registered_service(binding, list(flat), service=facts.service, plan=facts.plan)
        except ValidationError as exc:
            message = f"cannot register: {exc.error_count()} problem(s) with the generated RegisteredService"
            return (track, EmitEvent(Reason.REGISTRATION_CONFLICT, message, warning=True))
        actions: list[RegistrationAction] = [track, Register(registration.endpoint_secret(binding, flat), manifest)]
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
                self._remove(namespace, name)
            elif isinstance(action, Register):
                kube.apply_secret(action.endpoint_secret)
                kube.apply(action.manifest)
            else:
                assert facts.binding is not None
                kube.emit_event(
                    facts.binding, reason=action.reason.value, message=action.message, warning=action.warning
                )
        return DONE

    def _remove(self, namespace: str, name: str) -> None:
        kube = self.ctx.kube
        kube.delete(
            ResourceRef(
                api_version=RegisteredService.api_version_string(),
                kind=RegisteredService.KIND,
                name=name,
                namespace=namespace,
            )
        )
        kube.delete(
            ResourceRef(api_version="v1", kind="Secret", name=names.endpoint_secret_name(name), namespace=namespace)
        )
