"""Which plan events bring the plan's instances back (issue 31).

Aspects covered: a plan's first event, a change of its spec, of its metadata (held by its instances, being
deleted, a label) and its deletion queue every instance of it; a write of its status alone (the plan's own
reconcile reporting) and a write that changes nothing queue none of them. A change of its pause annotation queues
its instances' bindings too; an instance's own pause annotation is worth a reconcile.
"""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from opbroker.api.conventions import ANNOTATION_PAUSED, PAUSED
from opbroker.controller.app import Controller
from opbroker.controller.runtime.keys import Key
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


def test_pausing_a_plan_brings_back_its_instances_and_their_bindings() -> None:
    """A binding is paused by its plan too, and its instance's own events may not come (an instance paused already
    writes nothing more): the plan's pause, set or lifted, queues the bindings of its instances directly."""
    made, queued = controller()
    binding = Key("binding", "tenant", "b")
    made._instance_bindings.link(MEMBER, binding)
    plan = written(plan_body(), "1")
    made.on_plan("ADDED", plan)
    queued.clear()

    paused = written(plan, "2")
    paused["metadata"]["annotations"] = {ANNOTATION_PAUSED: PAUSED}
    made.on_plan("MODIFIED", paused)
    assert queued.count(MEMBER) == 1 and queued.count(binding) == 1

    queued.clear()
    labelled = written(paused, "3")
    labelled["metadata"]["labels"] = {"tier": "gold"}
    made.on_plan("MODIFIED", labelled)  # the instances decide anew; the pause stands: the bindings need not
    assert queued.count(MEMBER) == 1 and binding not in queued

    queued.clear()
    resumed = written(labelled, "4")
    resumed["metadata"]["annotations"] = {}
    made.on_plan("MODIFIED", resumed)
    assert queued.count(MEMBER) == 1 and queued.count(binding) == 1


def test_an_instance_whose_pause_annotation_changes_is_reconciled() -> None:
    made, queued = controller()
    instance = {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceInstance",
        "metadata": {"name": "db", "namespace": "tenant", "resourceVersion": "1", "generation": 1},
        "spec": {"planId": PLAN_ID, "serviceId": "svc", "instanceId": "db"},
        "status": {"state": "succeeded", "observedGeneration": 1},
    }
    made.on_instance("ADDED", instance)
    queued.clear()
    noted = written(instance, "2")
    noted["metadata"]["annotations"] = {"note": "x"}
    made.on_instance("MODIFIED", noted)
    assert MEMBER not in queued  # an annotation no reconcile decides on
    paused = written(noted, "3")
    paused["metadata"]["annotations"] = {ANNOTATION_PAUSED: PAUSED}
    made.on_instance("MODIFIED", paused)
    assert queued == [MEMBER]


def test_an_instance_of_a_plan_not_held_yet_brings_the_plan_to_its_reconciler() -> None:
    """Issue 45: the plan's finalizer is the plan reconciler's alone, so an instance waiting for its first apply
    cannot hold the plan itself: its event queues the plan (while it is not held), whose reconciler counts the
    instance and adds the finalizer; the plan's event then brings the instance back (above)."""
    made, queued = controller()
    plan = written(plan_body(held=False), "1")
    made.on_plan("ADDED", plan)
    instance = {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceInstance",
        "metadata": {"name": "db", "namespace": "tenant", "resourceVersion": "1", "generation": 1},
        "spec": {"planId": PLAN_ID, "serviceId": "svc", "instanceId": "db"},
        "status": {"state": "in_queue"},
    }
    queued.clear()
    made.on_instance("ADDED", instance)
    assert Key.of("plan", plan) in queued and MEMBER in queued

    made.on_plan("MODIFIED", written(plan_body(held=True), "2"))
    queued.clear()
    made.on_instance("MODIFIED", written(instance, "2", status={"state": "in progress"}))
    assert [key.kind for key in queued] == ["instance"]  # held: the plan is left alone
