"""Reconciling automatic registrations: an opted-in broker binding becomes a RegisteredService.

See :mod:`registration` for the rules. The generated objects are stamped with the binding's uid
(``opbroker.io/owner-uid``); one of those names without the stamp is never written or deleted (event
``ObjectNotOwned`` or ``RegistrationConflict``). Triggered by the binding's events and by its credentials
Secret's; the generated objects are applied (server-side) on every change, and removed as soon as the
binding is being deleted or opts out.

observe reads the binding, the generated service, the binding's catalog entries and (once the binding has
succeeded) its credentials as views; :func:`.core.registering_plan.plan` (pure) decides with :mod:`registration`;
act hands the actions to the one executor (Events on the binding are generic; following the credentials and
writing or removing the generated objects are the effects below, which decide nothing).

A registration that fails (its endpoint Secret refused in a namespace nobody onboarded, say) is shown on the binding
as a Warning Event naming the cause and the fix (:mod:`~opbroker.controller.core.shown_failures`), once per distinct
failure: never as its Ready condition, which is the binding's own (the binding succeeded; its registration is
another matter). It used to be in the controller's log only.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence
from typing import ClassVar

from opbroker.api.meta import ResourceRef
from opbroker.api.primaza import RegisteredService
from opbroker.controller.claims import servicebinding
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.core import names, registering_plan, registration
from opbroker.controller.claims.core.registering_plan import RegistrationAction, RegistrationFacts
from opbroker.controller.claims.core.views import CatalogEntry, ObjectView
from opbroker.controller.claims.kinds import REGISTERED_SERVICES
from opbroker.controller.core.shown_failures import Shown
from opbroker.controller.core.views import BindingView
from opbroker.controller.kinds import BINDINGS
from opbroker.controller.runtime.executor import Executor, Run, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.outcomes import Outcome

logger = logging.getLogger(__name__)

FAILED = "automatic registration as a RegisteredService failed:"
"""What a registration's failure Event says first (the binding's own Events are about the binding)."""


class RegistrationReconciler(ObservePlanAct[RegistrationFacts, RegistrationAction]):
    kind: ClassVar[str] = "registration"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.executor = executor(ctx)

    # -- a failure, shown on the binding (the runtime's ShowsFailures) -------------------------------------

    def show_failure(self, key: Key, shown: Shown, before: object | None, now: datetime.datetime) -> object | None:
        """A Warning Event on the binding, once per distinct failure (the same one again: nothing new to say)."""
        if before == shown:
            return before
        body = self.ctx.kube.get_custom(BINDINGS, key.namespace, key.name)
        if body is None:
            return None
        message = f"{FAILED} {shown.message}"
        self.ctx.kube.emit_event(body, reason=shown.reason.value, message=message, warning=True)
        return shown

    def clear_failure(self, key: Key, shown: object) -> None:
        """Nothing written to take back: the Event stays what happened."""

    def plan_of(self, binding: BindingView) -> CatalogEntry | None:
        entry = self.ctx.osb_catalog.plan(binding.plan_id)
        return CatalogEntry.of(entry.body) if entry else None

    def observe(self, key: Key) -> RegistrationFacts:
        kube = self.ctx.kube
        body = kube.get_custom(BINDINGS, key.namespace, key.name)
        generated = ObjectView.maybe(kube.get_custom(REGISTERED_SERVICES, key.namespace, key.name))
        endpoint = ObjectView.maybe(kube.read_secret(key.namespace, names.endpoint_secret_name(key.name)))
        if body is None:
            return RegistrationFacts(key, None, generated, endpoint_secret=endpoint)
        binding = BindingView.of(body)
        service = self.ctx.osb_catalog.service(registration.service_id(binding))
        secret = registering_plan.credentials_secret(binding)
        credentials = None
        if secret and registering_plan.succeeded(binding) and not binding.meta.deleting:
            credentials = servicebinding.decode(kube.read_secret(key.namespace, secret))
        return RegistrationFacts(
            key,
            binding,
            generated,
            self.plan_of(binding),
            CatalogEntry.of(service.body) if service else None,
            credentials,
            endpoint_secret=endpoint,
        )

    @staticmethod
    def plan(facts: RegistrationFacts) -> Sequence[RegistrationAction]:
        return registering_plan.plan(facts)

    def act(self, facts: RegistrationFacts, actions: Sequence[RegistrationAction]) -> Outcome:
        # With no binding, no action is an Event: the body only names the key.
        body = facts.binding.wire if facts.binding is not None else {"metadata": {}}
        return self.executor.run(facts.key, body, actions)


# -- the registration's own effects: each performs its action, none decides ---------------------------------


def executor(ctx: Context) -> Executor:
    """The one executor, for automatic registrations (the binding is the object Events go to)."""

    def track(run: Run, action: registering_plan.TrackCredentials) -> None:
        ctx.store.track_credentials(run.key.namespace, action.secret, run.key.name)

    def remove(run: Run, action: registering_plan.RemoveGenerated) -> None:
        namespace, name = run.key.namespace, run.key.name
        if action.service:
            ctx.kube.delete(
                ResourceRef(
                    api_version=RegisteredService.api_version_string(),
                    kind=RegisteredService.KIND,
                    name=name,
                    namespace=namespace,
                )
            )
        if action.secret_uid is not None:
            ctx.door(namespace).delete_secret(namespace, names.endpoint_secret_name(name), uid=action.secret_uid)

    def register(run: Run, action: registering_plan.Register) -> None:
        ctx.write_secret(dict(action.endpoint_secret), action.secret_version)
        ctx.kube.apply(dict(action.manifest))

    target = Target(ctx.kube, BINDINGS, RegistrationReconciler.kind)
    return Executor(
        target,
        {
            registering_plan.TrackCredentials: track,
            registering_plan.RemoveGenerated: remove,
            registering_plan.Register: register,
        },
    )
