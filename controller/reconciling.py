"""What every reconciler shares: the dependencies, status writes, events, error accounting."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from opbroker.api.osb import OperationState
from opbroker.controller.catalog import Catalog
from opbroker.controller.core import decisions
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.refusals import Severity
from opbroker.controller.kube import Kind, Kube, Refused
from opbroker.controller.reconciler import DONE, Conflict, Key, Outcome, TemporaryError
from opbroker.controller.registries import RegistryCache
from opbroker.controller.settings import ControllerSettings
from opbroker.controller.sources import SourceIndex, SourceWatchers
from opbroker.rendering import Renderer

logger = logging.getLogger(__name__)


class Placement(Protocol):
    """Where an instance or binding is reconciled: consulted first by the reconcilers.

    Each method returns None when the object is reconciled right here, or the queue's outcome when the
    placement took care of it (multi-cluster: scheduled, handed to a sister cluster, mirrored back).
    """

    def instance(self, instance: dict[str, Any]) -> Outcome | None: ...

    def binding(self, binding: dict[str, Any]) -> Outcome | None: ...


class LocalPlacement:
    """Single cluster: everything is reconciled here."""

    def instance(self, instance: dict[str, Any]) -> Outcome | None:
        return None

    def binding(self, binding: dict[str, Any]) -> Outcome | None:
        return None


LOCAL = LocalPlacement()


@dataclass(frozen=True)
class Deps:
    kube: Kube
    catalog: Catalog
    renderer: Renderer
    settings: ControllerSettings
    index: SourceIndex
    watchers: SourceWatchers
    placement: Placement = LOCAL
    own_writes: OwnWrites = field(default_factory=lambda: OwnWrites())
    registries: RegistryCache = field(default_factory=RegistryCache)


class OwnWrites:
    """The resourceVersion each object got from our own last write to it.

    The watch event a write of ours causes carries exactly that version; the reconcile that wrote it has
    already decided what comes next, so that event need not trigger another reconcile (each would cost
    several reads). Any other change — the broker's, a user's — has a version we did not write.
    """

    def __init__(self) -> None:
        self._versions: dict[Hashable, str] = {}

    def note(self, key: Hashable, resource_version: str | None) -> None:
        if resource_version:
            self._versions[key] = resource_version

    def caused(self, key: Hashable, resource_version: str | None) -> bool:
        return resource_version is not None and self._versions.get(key) == resource_version

    def forget(self, key: Hashable) -> None:
        self._versions.pop(key, None)


def key_of(kind: str, obj: dict[str, Any]) -> Key:
    return Key.of(kind, obj)


class AppliedMemory:
    """Applies whose status record waits for the operation's outcome, kept in memory.

    Recording an apply (resources, appliedSpec, observedGeneration) in its own status write while the
    operator is still working would cost one write per operation; instead the record rides along with the
    final state. Until then this memory stops later reconciles from applying again. It is lost on a
    restart or failover, and then the apply is simply repeated, which server-side apply makes harmless.
    Only the queue's single worker for a key touches its entry.
    """

    def __init__(self) -> None:
        self._records: dict[Hashable, tuple[Any, Any, dict[str, Any]]] = {}

    def remember(self, key: Hashable, version: tuple[Any, Any], record: dict[str, Any]) -> None:
        self._records[key] = (*version, record)

    def recall(self, key: Hashable, version: tuple[Any, Any]) -> dict[str, Any] | None:
        found = self._records.get(key)
        if found is None or (found[0], found[1]) != version:
            return None
        return found[2]

    def forget(self, key: Hashable) -> None:
        self._records.pop(key, None)


class StatusWriter:
    """Status patches with optimistic concurrency, plus the Events that go with state changes."""

    def __init__(self, deps: Deps, kind: Kind) -> None:
        self.deps = deps
        self.kind = kind
        self._key_kind = "binding" if kind.plural == "sfservicebindings" else "instance"

    def patch(self, obj: dict[str, Any], status: dict[str, Any], *, guarded: bool = True) -> dict[str, Any] | None:
        """Merge ``status`` into the object's status; ``guarded`` fails with Conflict if it moved on."""
        meta = obj["metadata"]
        try:
            patched = self.deps.kube.patch_custom_status(
                self.kind,
                meta["namespace"],
                meta["name"],
                status,
                resource_version=meta.get("resourceVersion") if guarded else None,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(meta["name"]) from exc
            raise
        if patched is not None:
            obj.clear()
            obj.update(patched)
            self.deps.own_writes.note(key_of(self._key_kind, obj), patched["metadata"].get("resourceVersion"))
        return patched

    def transition(
        self,
        obj: dict[str, Any],
        *,
        state: OperationState,
        reason: Reason,
        description: str = "",
        error: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Move to ``state`` (with condition), recording an Event when the state actually changes."""
        before = (obj.get("status") or {}).get("state")
        status = decisions.outcome_status(obj, state=state, reason=reason, description=description, error=error)
        status.update(extra or {})
        self.patch(obj, status)
        if state in (OperationState.SUCCEEDED, OperationState.FAILED):
            # The operation is over: changes of the objects its status template read can no longer change
            # its outcome, so they stop enqueueing it (a Database shared by ten bindings would otherwise
            # re-evaluate all of them at each change; the next operation tracks what it reads again).
            self.deps.index.forget(key_of(self._key_kind, obj))
        # Events for outcomes only: "in progress" is visible in status and would double the writes.
        if before != state.value and state in (OperationState.SUCCEEDED, OperationState.FAILED):
            self.deps.kube.emit_event(
                obj,
                reason=reason.value,
                message=error or description or state.value,
                warning=state == OperationState.FAILED,
            )

    def refused(self, obj: dict[str, Any], exc: Refused) -> Outcome:
        """The API server refused a rendered object: a permanent refusal fails the operation now, with the
        API server's (masked) explanation; one that can be fixed outside the request is counted and retried
        (see :mod:`opbroker.controller.core.refusals`)."""
        if exc.refusal.severity is not Severity.PERMANENT:
            return self.fail_or_retry(obj, exc, Reason.APPLY_FAILED)
        logger.warning("%s %s: %s", obj["kind"], obj["metadata"]["name"], exc.refusal.describe())
        self.transition(obj, state=OperationState.FAILED, reason=Reason.APPLY_REFUSED, error=exc.refusal.describe())
        return DONE

    def still_in_progress(self, obj: dict[str, Any], *, extra: dict[str, Any] | None = None) -> Outcome:
        """The operator has not reported an outcome yet: look again later, or fail the operation once it has
        run past ``max_operation_seconds`` (with ``extra``, the record of what was applied)."""
        settings = self.deps.settings
        age = decisions.overdue(obj, max_seconds=settings.max_operation_seconds)
        if age is None:
            return Outcome(
                requeue_after=decisions.poll_after(
                    obj, poll_seconds=settings.status_poll_seconds, max_seconds=settings.max_operation_seconds
                )
            )
        operation = ((obj.get("status") or {}).get("lastOperation") or {}).get("type") or "the operation"
        error = (
            f"{operation} timed out: no outcome {age:.0f}s after it was requested (limit "
            f"{settings.max_operation_seconds:.0f}s); the plan's status template still reports it in progress"
        )
        logger.warning("%s %s: %s", obj["kind"], obj["metadata"]["name"], error)
        self.transition(obj, state=OperationState.FAILED, reason=Reason.TIMED_OUT, error=error, extra=extra)
        return DONE

    def fail_or_retry(self, obj: dict[str, Any], exc: Exception, reason: Reason) -> Outcome:
        """Count an error; give up past the threshold (operation failed), else let the queue back off."""
        message = str(exc) or type(exc).__name__
        status, gave_up = decisions.error_status(obj, message=message, threshold=self.deps.settings.error_threshold)
        self.patch(obj, status, guarded=False)
        if gave_up:
            self.deps.kube.emit_event(obj, reason=Reason.GAVE_UP.value, message=status["error"], warning=True)
            logger.warning("%s %s: gave up: %s", obj["kind"], obj["metadata"]["name"], message)
            return DONE
        self.deps.kube.emit_event(obj, reason=reason.value, message=message, warning=True)
        raise TemporaryError(message) from exc
