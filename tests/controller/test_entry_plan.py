"""The catalog entries' plan (SFPlan, SFService), table-tested: exact action lists of the shared vocabulary for
each situation of a trusted entry (the untrusted ones: test_catalog_trust.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from opbroker.api.conventions import FINALIZER
from opbroker.controller.catalog.core import catalog_status, entry_plan
from opbroker.controller.catalog.core.entry_plan import EntryFacts
from opbroker.controller.core import actions as a
from opbroker.controller.core.decisions import ServiceUsers
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import EntryView
from opbroker.controller.runtime.clock import FAKE_EPOCH as NOW
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.policies import DEFAULTS
from tests.plan_support import timeless

ACCEPTED = catalog_status.plan_verdict(None)


def entry(*, held: bool = False, deleting: bool = False, says: catalog_status.Verdict | None = None) -> dict[str, Any]:
    """An SFPlan at generation 2; ``says``: its status already announces that verdict for generation 2."""
    meta: dict[str, Any] = {"name": "plan", "namespace": "opbroker", "uid": "u1", "generation": 2}
    meta["resourceVersion"] = "7"
    if held:
        meta["finalizers"] = ["other.example/keep", FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body: dict[str, Any] = {"kind": "SFPlan", "metadata": meta, "spec": {"id": "plan-id"}}
    if says is not None:
        body["status"] = {
            "observedGeneration": 2,
            "conditions": [
                {"type": "Other", "status": "True", "reason": "Kept"},
                {
                    "type": "Ready",
                    "status": "True" if says.ready else "False",
                    "reason": says.reason.value,
                    "message": says.message,
                    "observedGeneration": 2,
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                },
            ],
        }
    return body


def facts(body: dict[str, Any], users: int = 0, service_users: ServiceUsers | None = None) -> EntryFacts:
    return EntryFacts(Key("plan", "opbroker", "plan"), EntryView.of(body), ACCEPTED, users, service_users, now=NOW)


def ready(verdict: catalog_status.Verdict) -> dict[str, Any]:
    """The Ready condition a write announcing ``verdict`` at generation 2 carries (transition time aside)."""
    return {
        "type": "Ready",
        "status": "True" if verdict.ready else "False",
        "reason": verdict.reason.value,
        "message": verdict.message,
        "observedGeneration": 2,
    }


IN_USE = catalog_status.in_use_verdict(3)
SERVICE_IN_USE = catalog_status.service_in_use_verdict(1, 2)
KEPT = {"type": "Other", "status": "True", "reason": "Kept"}


@pytest.mark.parametrize(
    ("plan", "given", "wanted"),
    [
        (
            entry_plan.plan_entry,
            facts(entry()),
            [a.WriteStatus({"observedGeneration": 2, "conditions": [ready(ACCEPTED)]})],
        ),
        (
            entry_plan.plan_entry,
            facts(entry(), users=3),
            [
                a.EnsureFinalizer(present=True),
                a.WriteStatus({"observedGeneration": 2, "conditions": [ready(ACCEPTED)]}),
            ],
        ),
        (entry_plan.plan_entry, facts(entry(held=True, says=ACCEPTED)), []),
        (entry_plan.plan_entry, facts(entry(says=ACCEPTED), users=1), [a.EnsureFinalizer(present=True)]),
        (
            entry_plan.plan_entry,
            facts(entry(held=True, deleting=True, says=ACCEPTED), users=3),
            [
                a.WriteStatus(
                    {"observedGeneration": 2, "conditions": [KEPT, ready(IN_USE)]},
                    event=a.Event(Reason.PLAN_IN_USE.value, IN_USE.message, warning=True),
                ),
                a.Requeue(DEFAULTS.in_use_recheck.base),
            ],
        ),
        (
            entry_plan.plan_entry,
            facts(entry(held=True, deleting=True, says=IN_USE), users=3),
            [a.Requeue(DEFAULTS.in_use_recheck.base)],
        ),
        (
            entry_plan.plan_entry,
            facts(entry(held=True, deleting=True, says=IN_USE)),
            [a.EnsureFinalizer(present=False)],
        ),
        (entry_plan.plan_entry, facts(entry(deleting=True, says=ACCEPTED)), []),
        (
            entry_plan.service_entry,
            facts(entry(held=True, deleting=True), 3, ServiceUsers(1, 2)),
            [
                a.WriteStatus(
                    {"observedGeneration": 2, "conditions": [ready(SERVICE_IN_USE)]},
                    event=a.Event(Reason.SERVICE_IN_USE.value, SERVICE_IN_USE.message, warning=True),
                ),
                a.Requeue(DEFAULTS.in_use_recheck.base),
            ],
        ),
        (entry_plan.service_entry, facts(entry(held=True, deleting=True)), [a.EnsureFinalizer(present=False)]),
    ],
    ids=[
        "new: Ready written",
        "new and used: held, Ready written",
        "status says it already: nothing (the controller's own write causes none)",
        "used, not held: held, no write",
        "deleted while used: waits, says why once, looks again",
        "still waiting, said already: looks again only",
        "deleted, no longer used: released, nothing written",
        "deleted, never held: nothing",
        "service deleted under plans and instances: waits",
        "service deleted, unused: released",
    ],
)
def test_entry_plan(plan: Any, given: EntryFacts, wanted: list[Any]) -> None:
    assert timeless(plan(given)) == wanted


def test_a_write_keeps_the_transition_time_while_the_status_does_not_flip() -> None:
    invalid = catalog_status.plan_verdict("spec.id: Field required")
    body = entry(says=dataclasses.replace(invalid, message="an older finding"))
    (write,) = entry_plan.plan_entry(dataclasses.replace(facts(body), verdict=invalid))
    assert isinstance(write, a.WriteStatus)
    assert write.patch["conditions"][-1]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert write.patch["conditions"][-1]["message"] == invalid.message
