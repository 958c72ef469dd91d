"""Reconciling automatic registrations: an opted-in broker binding becomes a RegisteredService.

See :mod:`registration` for the rules. Triggered by the binding's events and by its credentials
Secret's; the generated objects are applied (server-side) on every change, and removed as soon as the
binding is being deleted or opts out.
"""

from __future__ import annotations

import logging
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
from opbroker.controller.reconciler import DONE, Key, Outcome

logger = logging.getLogger(__name__)


class RegistrationReconciler:
    kind: ClassVar[str] = "registration"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def plan_of(self, binding: dict[str, Any]) -> dict[str, Any] | None:
        entry = self.ctx.osb_catalog.plan((binding.get("spec") or {}).get("planId", ""))
        return entry.body if entry else None

    def wanted(self, binding: dict[str, Any]) -> bool:
        return registration.opted_in(binding, self.plan_of(binding))

    def reconcile(self, key: Key) -> Outcome:
        return self.reconcile_object(key.namespace, key.name)

    def reread(self, key: Key) -> None:
        return None  # reads come from the watch cache or the API; nothing to drop

    def reconcile_object(self, namespace: str, name: str) -> Outcome:
        kube = self.ctx.kube
        binding = kube.get_custom(BINDINGS, namespace, name)
        generated = kube.get_custom(REGISTERED_SERVICES, namespace, name)
        if binding is None or binding["metadata"].get("deletionTimestamp") or not self.wanted(binding):
            self.ctx.store.track_credentials(namespace, None, name)
            if generated is not None and registration.generated_by(generated, name):
                self._remove(namespace, name)
            return DONE
        status = binding.get("status") or {}
        secret_name = (status.get("response") or {}).get("secretRef")
        self.ctx.store.track_credentials(namespace, secret_name, name)
        if status.get("state") != OperationState.SUCCEEDED.value or not secret_name:
            return DONE  # the binding's next events bring it back
        credentials = registration.credentials_of(servicebinding.decode(kube.read_secret(namespace, secret_name)))
        if credentials is None:
            return DONE  # the credentials Secret's events bring it back
        flat = registration.flatten(credentials)
        if generated is not None and not registration.generated_by(generated, name):
            kube.emit_event(
                binding,
                reason=Reason.REGISTRATION_CONFLICT.value,
                message=f"a RegisteredService {name!r} not generated from this binding exists; not registering",
                warning=True,
            )
            return DONE
        spec = binding.get("spec") or {}
        service = self.ctx.osb_catalog.service(spec.get("serviceId", ""))
        try:
            manifest = registration.registered_service(
                binding, list(flat), service=service.body if service else None, plan=self.plan_of(binding)
            )
        except ValidationError as exc:
            kube.emit_event(
                binding,
                reason=Reason.REGISTRATION_CONFLICT.value,
                message=f"cannot register: {exc.error_count()} problem(s) with the generated RegisteredService",
                warning=True,
            )
            return DONE
        kube.apply_secret(registration.endpoint_secret(binding, flat))
        kube.apply(manifest)
        if generated is None:
            kube.emit_event(
                binding,
                reason=Reason.SERVICE_REGISTERED.value,
                message=f"registered as RegisteredService {name!r} with endpoint keys {', '.join(flat)}",
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
