"""The views a plan rollout reads (controller/catalog/core/rollout_views.py), no server.

Covers: an instance's plan, state, applied plan hash, cluster and request namespace; a plan found by name, OSB id
or OSB name; fields the server adds ignored; wrong types read as absent rather than failing the rollout.
"""

from __future__ import annotations

from typing import Any

from opbroker.controller.catalog.core.rollout_views import AdminRequestView, PlanView, RolloutInstance
from opbroker.controller.catalog.rollouts import Skip, verdict


def instance(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "db", "namespace": "team", "resourceVersion": "4", "managedFields": []},
        "spec": {"planId": "p", **spec},
        "status": {"state": "succeeded", "appliedPlanHash": "h1", "somethingNew": 1},
    }


def test_rollout_instance_reads_its_cluster_and_request_namespace() -> None:
    body = instance(clusterId="c2", context={"namespace": "tenant-ns", "platform": "kubernetes"})
    view = RolloutInstance.of(body)
    assert (view.cluster_id, view.context_namespace) == ("c2", "tenant-ns")
    assert (view.key, view.where, view.meta.resource_version) == (("team", "db"), "team/db", "4")
    assert (view.view.plan_id, view.view.status.state, view.view.applied_plan_hash) == ("p", "succeeded", "h1")
    assert view.wire is body


def test_rollout_instance_reads_wrong_types_as_absent() -> None:
    view = RolloutInstance.of(instance(clusterId=["c2"], context={"namespace": 5}))
    assert (view.cluster_id, view.context_namespace) == ("", None)
    garbled = RolloutInstance.of({"metadata": {"name": "x", "namespace": "n"}, "spec": "?", "status": {"state": 3}})
    assert verdict(garbled, plan_id="p", plan_hash=None, only_outdated=False, marked=set()) is Skip.OTHER_PLAN
    busy = RolloutInstance.of({**instance(), "status": {"state": ["succeeded"]}})
    assert verdict(busy, plan_id="p", plan_hash=None, only_outdated=False, marked=set()) is Skip.BUSY, (
        "a state that is not text is no outcome: not marked"
    )


def test_plan_view_answers_to_its_name_id_and_osb_name() -> None:
    body = {"metadata": {"name": "small-plan", "namespace": "opbroker"}, "spec": {"id": "p1", "name": "small", "x": 1}}
    plan = PlanView.of(body)
    assert all(plan.answers_to(w) for w in ("small-plan", "p1", "small")) and not plan.answers_to("large")
    assert plan.plan_id == "p1" and dict(plan.spec) == body["spec"] and plan.metadata["namespace"] == "opbroker"
    unnamed = PlanView.of({"metadata": {"name": "n"}, "spec": {"id": 7, "name": None}})
    assert (unnamed.osb_id, unnamed.osb_name, unnamed.plan_id) == (None, None, "n")
    assert not unnamed.answers_to("7")


def test_admin_request_view_names_the_configmap_an_answer_goes_to() -> None:
    body = {"metadata": {"name": "opbroker-rollout-p", "resourceVersion": "8", "labels": {"x": "y"}}, "data": {}}
    view = AdminRequestView.of(body)
    assert (view.meta.name, view.meta.resource_version) == ("opbroker-rollout-p", "8")
    assert view.body == body and view.body is not body, "the parsers get a copy; the body read is never written"
    garbled = AdminRequestView.of({"metadata": {"name": 3, "resourceVersion": 8}})
    assert (garbled.meta.name, garbled.meta.resource_version) == ("", None)
