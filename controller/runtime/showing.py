"""Showing a failure where the user looks: on the object it stopped, as its Ready condition and a Warning Event.

The runtime classifies every failed reconcile (``reconciler.troubles`` → ``core.shown_failures``) and, for a kind
that mixes in :class:`ShowsFailuresOnObject`, calls :meth:`~ShowsFailuresOnObject.show_failure`:

* an object that is not Ready gets ``Ready=False`` with the failure's reason and message (the fix first), and a
  Warning Event saying the same — once per distinct failure: the same failure again costs one read, and a write
  only when the kind rewrote Ready meanwhile (a retry that records its request first);
* an object that is Ready (a settled one a check of failed) keeps its condition and gets the Event only;
* once a reconcile of the key succeeds again, a Ready condition that still shows the failure is set back to what it
  was before (the kind's own plan writes Ready on its transitions only, and would otherwise never replace ours).

The kind's own conditions stay the kind's: nothing here decides anything about the object's life.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from opbroker.controller.core.conditions import Condition, with_conditions
from opbroker.controller.core.shown_failures import Shown
from opbroker.controller.core.views import ConditionView, condition_wire, conditions_of
from opbroker.controller.runtime.executor import Executor
from opbroker.controller.runtime.keys import Key
from opbroker.kubeclient.wire import JsonObject, mapping_of

logger = logging.getLogger(__name__)

READY = "Ready"


@dataclass(frozen=True)
class ShownFailure:
    """What the runtime keeps for a key whose failure is shown: the failure, and the Ready condition it replaced
    (None: the object had none, or kept its own — a Ready one gets the Event only)."""

    shown: Shown
    replaced: JsonObject | None
    wrote: bool


def _ready(body: JsonObject) -> ConditionView | None:
    found = [c for c in conditions_of(mapping_of(body.get("status")).get("conditions")) if c.type == READY]
    return found[0] if found else None


class ShowsFailuresOnObject:
    """Mixed into a kind's reconciler (it has an :class:`~.executor.Executor`): its objects show their failures."""

    executor: Executor

    def show_failure(self, key: Key, shown: Shown, before: object | None, now: datetime.datetime) -> object | None:
        previous = before if isinstance(before, ShownFailure) else None
        again = previous is not None and previous.shown == shown
        if again and previous is not None and not previous.wrote:
            return previous  # a Ready object: its Event is out, its condition is its own
        target = self.executor.target
        body = target.kube.get_custom(target.kind, key.namespace, key.name, fresh=True)
        if body is None:
            return None
        ready = _ready(body)
        if again and ready is not None and (ready.reason, ready.message) == (shown.reason.value, shown.message):
            return previous  # shown already: no write, no second Event
        settled = ready is not None and ready.status == "True"
        replaced = previous.replaced if previous is not None and previous.wrote else None
        if not settled:
            if previous is None or not previous.wrote:
                replaced = condition_wire(ready) if ready is not None else None
            held = conditions_of(mapping_of(body.get("status")).get("conditions"))
            generation = mapping_of(body.get("metadata")).get("generation")
            change = Condition(READY, False, shown.reason, shown.message)
            patch = {
                "conditions": with_conditions(held, [change], generation if isinstance(generation, int) else None, now)
            }
            written = target.kube.patch_custom_status(target.kind, key.namespace, key.name, patch)
            body = written or body
        if not again:  # the kind wrote its own Ready meanwhile (a retry records its request): shown again, one Event
            target.kube.emit_event(body, reason=shown.reason.value, message=shown.message, warning=True)
        return ShownFailure(shown, replaced, wrote=not settled)

    def clear_failure(self, key: Key, shown: object) -> None:
        if not isinstance(shown, ShownFailure) or not shown.wrote:
            return
        target = self.executor.target
        body = target.kube.get_custom(target.kind, key.namespace, key.name, fresh=True)
        if body is None:
            return
        ready = _ready(body)
        if ready is None or ready.reason != shown.shown.reason.value or ready.message != shown.shown.message:
            return  # the kind wrote Ready since: it says what is true now
        held = conditions_of(mapping_of(body.get("status")).get("conditions"))
        kept = [condition_wire(c) for c in held if c.type != READY]
        restored = [*kept, shown.replaced] if shown.replaced is not None else kept
        version = mapping_of(body.get("metadata")).get("resourceVersion")
        try:
            target.kube.patch_custom_status(
                target.kind,
                key.namespace,
                key.name,
                {"conditions": restored},
                resource_version=version if isinstance(version, str) else None,
            )
        except ApiException as exc:
            if exc.status != 409:  # moved on meanwhile: its own writer said what is true now
                raise
