"""Which plan events bring the plan's instances back (issue 31).

Aspects covered: a plan's first event, a change of its spec, of its metadata (held by its instances, being
deleted, a label) and its deletion queue every instance of it; a write of its status alone (the plan's own
reconcile reporting) and a write that changes nothing queue none of them.
"""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from opbroker.controller.app import Controller
from opbroker.controller.reconciler import Key
from opbroker.controller.settings import ControllerSettings
from tests.controller.test_reconcile_instances_bindings import PLAN_ID, plan_body

MEMBER = Key("instance", "tenant", "db")


def controller() -> tuple[Controller, list[Key]]:
    made = Controller(client.ApiClient(), ControllerSettings())
    queued: list[Key] = []
    made._enqueue = queued.append  # type: ignore[method-assign]
    made._plan_members.link(PLAN_ID, MEMBER)
    return made, queued


def written(body: dict[str, Any], version: str, **changes: Any) -> dict[str, Any]:
    """``body`` as a later write left it: a new resourceVersion, ``changes`` applied at the top level."""
    later = copy.deepcopy(body)
    later["metadata"]["resourceVersion"] = version
    later.update(changes)
    return later


def test_only_a_change_instances_decide_on_brings_them_back() -> None:
    made, queued = controller()
    plan = plan_body(held=False)
    made.on_plan("ADDED", written(plan, "1"))
    assert MEMBER in queued

    queued.clear()
    reported = written(plan, "2", status={"conditions": [{"type": "Ready", "status": "True"}]})
    made.on_plan("MODIFIED", reported)
    made.on_plan("MODIFIED", written(reported, "3"))  # nothing changed but the version
    assert MEMBER not in queued

    held = written(reported, "4")
    held["metadata"]["finalizers"] = ["opbroker.io/finalizer"]
    made.on_plan("MODIFIED", held)
    assert queued.count(MEMBER) == 1

    queued.clear()
    labelled = written(held, "5")
    labelled["metadata"]["labels"] = {"tier": "gold"}
    made.on_plan("MODIFIED", labelled)
    spec_changed = written(labelled, "6", spec={**labelled["spec"], "description": "another"})
    made.on_plan("MODIFIED", spec_changed)
    assert queued.count(MEMBER) == 2

    queued.clear()
    made.on_plan("DELETED", spec_changed)
    assert queued.count(MEMBER) == 1
    queued.clear()
    made.on_plan("ADDED", spec_changed)  # made again under its name: its instances decide anew
    assert queued.count(MEMBER) == 1
