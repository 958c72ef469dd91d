"""An automatic registration's decisions (pure): what one reconcile of an opted-in broker binding does.

See :mod:`registration` for the rules. The Events (on the binding) are the executor's generic action; the
registration's own effects (the credentials Secret followed, the generated objects written or removed) are
declared here and performed by :mod:`opbroker.controller.claims.registering`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from opbroker.api.osb import OperationState
from opbroker.controller.claims.core import names, registration
from opbroker.controller.claims.core.views import CatalogEntry, ObjectView, credentials_secret_of
from opbroker.controller.core import actions as a
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import BindingView
from opbroker.controller.runtime.keys import Key
from opbroker.kubeclient.wire import JsonObject


@dataclass(frozen=True)
class RegistrationFacts:
    key: Key
    binding: BindingView | None
    generated: ObjectView | None
    """The RegisteredService named after the binding, whoever made it."""
    plan: CatalogEntry | None = None
    """The binding's SFPlan."""
    service: CatalogEntry | None = None
    """The binding's SFService."""
    credentials: Mapping[str, str] | None = None
    """The decoded credentials Secret (read only once the binding has succeeded)."""
    endpoint_secret: ObjectView | None = None
    """The Secret named like the generated endpoint Secret, whoever made it."""


# -- the registration's own actions (performed by registering's effects) ------------------------------------


@dataclass(frozen=True)
class TrackCredentials:
    """Follow ``secret`` (the binding's credentials; None: none): its events bring the binding back."""

    secret: str | None


@dataclass(frozen=True)
class RemoveGenerated:
    """Delete the generated RegisteredService (``service``) and endpoint Secret (the one with ``secret_uid``):
    each only when stamped as the binding's."""

    service: bool = True
    secret_uid: str | None = None


@dataclass(frozen=True)
class Register:
    endpoint_secret: JsonObject = field(repr=False)
    manifest: JsonObject = field(repr=False)
    secret_version: str | None = None
    """The resourceVersion of the stamped endpoint Secret read; None: there was none (create it)."""


RegistrationAction = TrackCredentials | RemoveGenerated | Register | a.Event


def credentials_secret(binding: BindingView) -> str | None:
    """The binding's credentials Secret (``status.response.secretRef``)."""
    return credentials_secret_of(binding)


def succeeded(binding: BindingView) -> bool:
    return binding.status.state == OperationState.SUCCEEDED.value


def _generated_by(obj: ObjectView | None, name: str, uid: str | None) -> bool:
    return registration.generated_by(obj, name, uid)


def plan(facts: RegistrationFacts) -> list[RegistrationAction]:
    binding, generated, name = facts.binding, facts.generated, facts.key.name
    uid = (binding.meta.uid or None) if binding is not None else None
    endpoint = facts.endpoint_secret
    if binding is None or binding.meta.deleting or not registration.opted_in(binding, facts.plan):
        ours = _generated_by(generated, name, uid)
        secret_ours = _generated_by(endpoint, name, uid)
        if ours or secret_ours:
            secret_uid = (endpoint.meta.uid or None) if endpoint is not None and secret_ours else None
            return [TrackCredentials(None), RemoveGenerated(service=ours, secret_uid=secret_uid)]
        return [TrackCredentials(None)]
    secret = credentials_secret(binding)
    track = TrackCredentials(secret)
    if not succeeded(binding) or not secret:
        return [track]  # the binding's next events bring it back
    credentials = registration.credentials_of(facts.credentials)
    if credentials is None:
        return [track]  # the credentials Secret's events bring it back
    flat = registration.flatten(credentials)
    if generated is not None and not _generated_by(generated, name, uid):
        message = f"a RegisteredService {name!r} not generated from this binding exists; not registering"
        return [track, a.Event(Reason.REGISTRATION_CONFLICT.value, message, warning=True)]
    secret_name = names.endpoint_secret_name(name)
    if endpoint is not None and not _generated_by(endpoint, name, uid):
        message = (
            f"a Secret {secret_name!r} not stamped as this binding's ({ANNOTATION_OWNER_UID}) exists: "
            "left untouched; not registering"
        )
        return [track, a.Event(Reason.OBJECT_NOT_OWNED.value, message, warning=True)]
    try:
        manifest = registration.registered_service(binding, list(flat), service=facts.service, plan=facts.plan)
    except ValidationError as exc:
        message = f"cannot register: {exc.error_count()} problem(s) with the generated RegisteredService"
        return [track, a.Event(Reason.REGISTRATION_CONFLICT.value, message, warning=True)]
    register = Register(
        registration.endpoint_secret(binding, flat),
        manifest,
        secret_version=endpoint.meta.resource_version if endpoint is not None else None,
    )
    actions: list[RegistrationAction] = [track, register]
    if generated is None:
        message = f"registered as RegisteredService {name!r} with endpoint keys {', '.join(flat)}"
        actions.append(a.Event(Reason.SERVICE_REGISTERED.value, message))
    return actions
