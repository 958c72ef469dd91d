"""The pure plan of SFService and SFPlan (the catalog entries): what to write about each, and its finalizer.

:mod:`opbroker.controller.catalog.catalog_entries` observes an entry into :class:`EntryFacts` (its view, the verdict of
the checks, how many objects use it, whether it is trusted) and hands :func:`plan`'s actions to the executor.
Every decision is here, in the shared vocabulary (:mod:`.actions`):

* an entry outside the trusted namespaces gets Ready=False (``UntrustedNamespace``, naming where catalog entries
  live) and is warned about once per generation (a Warning Event, and
  :class:`NoteWarned` so the next reconcile of the same generation stays quiet); its status is the tenant's
  and never written; a finalizer of ours left from a time it was trusted is dropped when it is deleted;
* a trusted entry gets the finalizer while something uses it (:func:`.decisions.entry_guard`); deleted
  meanwhile, it waits (Ready=False, ``PlanInUse`` / ``ServiceInUse``, a Warning Event) and is looked at again
  after the policy table's ``in_use_recheck`` (:attr:`EntryFacts.recheck_in`); deleted and unused, the
  finalizer goes and nothing more is written;
* otherwise its Ready condition says the verdict, written only when the status does not say it yet
  (:func:`.catalog_status.status_patch`), guarded by the resourceVersion the verdict was made on.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opbroker.controller.catalog.core import catalog_status
from opbroker.controller.catalog.core.catalog_status import Verdict
from opbroker.controller.core import actions as a
from opbroker.controller.core.decisions import PlanGuard, ServiceUsers, entry_guard, entry_needs_count
from opbroker.controller.core.views import EntryView
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.policies import DEFAULTS

__all__ = ["EntryFacts", "NoteWarned", "entry_needs_count", "plan_entry", "service_entry"]


@dataclass(frozen=True)
class EntryFacts:
    key: Key
    entry: EntryView
    verdict: Verdict
    users: int = 0
    """Instances using the plan, or plans and instances using the service; counted only when the entry's
    finalizer depends on it."""
    service_users: ServiceUsers | None = None
    """For a service: its users, by kind (for the message of a deletion that waits)."""
    trusted: bool = True
    """The object lives in a trusted namespace (else it is a tenant's: warned about, never served)."""
    warned: bool = False
    """Untrusted, and already warned about at this generation (by this controller process)."""
    hold_unused: bool = False
    """Hold the entry before anything uses it (sharded: :func:`.decisions.entry_guard`)."""
    recheck_in: float = DEFAULTS.in_use_recheck.base
    """When an entry whose deletion waits for its users is looked at again: the policy table's ``in_use_recheck``,
    jittered by the edge."""
    now: datetime.datetime = field(kw_only=True)
    """The moment of the read (observe's clock; the plan reads none): a Ready condition's transition time."""


@dataclass(frozen=True)
class NoteWarned:
    """Remember (in memory) that the untrusted entry was warned about at ``mark`` (its uid and generation)."""

    mark: tuple[str, int | None]


def untrusted(facts: EntryFacts) -> list[Any]:
    """An object outside the trusted namespaces: its Ready condition says so and where catalog entries live
    (written when it does not say it yet: nothing of ours reads it back, it is for the user looking), with a
    Warning Event once per generation; never held (a finalizer of ours left from a time it was trusted is dropped
    when it is deleted, so it can go)."""
    entry = facts.entry
    if entry.meta.deleting:
        return [a.EnsureFinalizer(present=False)] if entry.meta.held else []
    verdict = facts.verdict
    patch = catalog_status.status_patch(entry, verdict, facts.now)
    written = [a.WriteStatus(patch)] if patch is not None else []
    if facts.warned:
        return written
    return [*written, a.Event(verdict.reason.value, verdict.message, warning=True), NoteWarned(entry.mark)]


def as_checked(facts: EntryFacts) -> list[Any]:
    """The status write announcing the entry's verdict, if its status does not say it yet."""
    patch = catalog_status.status_patch(facts.entry, facts.verdict, facts.now)
    return [] if patch is None else [a.WriteStatus(patch)]


def waiting(facts: EntryFacts, verdict: Verdict) -> list[Any]:
    """A deletion that waits for the entry's users: say why (status and a Warning Event), look again later."""
    patch = catalog_status.status_patch(facts.entry, verdict, facts.now)
    event = a.Event(verdict.reason.value, verdict.message, warning=True)
    return [*([a.WriteStatus(patch, event=event)] if patch is not None else []), a.Requeue(facts.recheck_in)]


def _plan(facts: EntryFacts, in_use: Verdict) -> Sequence[Any]:
    if not facts.trusted:
        return untrusted(facts)
    step = entry_guard(facts.entry.meta, users=facts.users, hold_unused=facts.hold_unused)
    if step is PlanGuard.RELEASE:
        return [a.EnsureFinalizer(present=False)]  # deleted and unused: it goes, nothing more is written to it
    held = [a.EnsureFinalizer(present=True)] if step is PlanGuard.HOLD else []
    if step is PlanGuard.WAIT:
        return [*held, *waiting(facts, in_use)]
    return [*held, *as_checked(facts)]


def plan_entry(facts: EntryFacts) -> Sequence[Any]:
    """An SFPlan: ready as checked — unless it is being deleted under instances, which it then waits for."""
    return _plan(facts, catalog_status.in_use_verdict(facts.users))


def service_entry(facts: EntryFacts) -> Sequence[Any]:
    """An SFService: ready as checked — unless it is being deleted under plans or instances, which it then waits
    for (as a plan waits for its instances)."""
    users = facts.service_users or ServiceUsers(0, facts.users)
    return _plan(facts, catalog_status.service_in_use_verdict(users.plans, users.instances))
