"""Multi-cluster's typed views over wire objects (controller/multicluster/core/views.py), no server.

Covers: each view reads the fields it names; fields the server adds are ignored; a field of the wrong type (an
object edited by hand) reads as absent instead of failing; ``wire`` is the body as read.
"""

from __future__ import annotations

from typing import Any

from opbroker.controller.core.views import SecretView
from opbroker.controller.multicluster.core import placement_plan, replicas
from opbroker.controller.multicluster.core.views import ReplicaView, SFClusterView
from opbroker.controller.multicluster.reasons import ANNOTATION_MASTER_UID, ConditionType
from opbroker.controller.runtime.clock import FAKE_EPOCH as NOW


def copy_body(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceBinding",
        "metadata": {
            "name": "b",
            "namespace": "team",
            "uid": "cu",
            "generation": 3,
            "resourceVersion": "12",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {ANNOTATION_MASTER_UID: "mu"},
            "managedFields": [{"manager": "someone"}],
        },
        "spec": {"id": "b", "instanceId": "db", "planId": "p1", "clusterId": "c2", "addedLater": {"x": 1}},
        "status": status,
    }


def test_replica_view_reads_what_multicluster_decides_on() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "Bound", "message": "ok", "extra": "ignored"}
    body = copy_body(
        state="succeeded", observedGeneration=3, response={"secretRef": "b-creds"}, conditions=[ready], newField=[1]
    )
    view = ReplicaView.of(body)
    assert (view.api_version, view.kind) == ("osb.servicefabrik.io/v1alpha1", "SFServiceBinding")
    assert (view.meta.name, view.meta.namespace, view.meta.uid, view.meta.generation) == ("b", "team", "cu", 3)
    assert (view.cluster_id, view.plan_id, view.instance_ref) == ("c2", "p1", "db")
    assert (view.status.state, view.status.observed_generation, view.secret_ref) == ("succeeded", 3, "b-creds")
    assert view.master_uid == "mu" and view.created == "2026-01-01T00:00:00Z" and not view.rendered
    condition = view.condition(ConditionType.READY)
    assert condition is not None and (condition.status, condition.reason) == ("True", "Bound")
    assert view.spec["addedLater"] == {"x": 1}, "the spec is copied to the sister verbatim, unknown fields too"
    assert view.wire is body


def test_replica_view_reads_wrong_types_as_absent() -> None:
    body = {
        "kind": 7,
        "metadata": {"name": "db", "generation": "3", "annotations": ["not", "a", "map"]},
        "spec": {"clusterId": 2, "planId": ["p"], "instanceId": None},
        "status": {"state": 5, "response": "secret", "conditions": "Ready", "resources": []},
    }
    view = ReplicaView.of(body)
    assert (view.kind, view.meta.generation, view.master_uid) == ("", None, None)
    assert (view.cluster_id, view.plan_id, view.instance_ref) == (None, "", "")
    assert (view.status.state, view.secret_ref, view.status.conditions, view.rendered) == (None, None, (), False)
    assert ReplicaView.of({"spec": "nonsense", "status": ["x"], "metadata": None}).meta.name == ""


def test_decisions_on_a_hand_edited_copy_do_not_fail() -> None:
    """A copy whose status a tenant garbled is neither settled wrongly nor a crash: it reads as no state yet."""
    garbled = ReplicaView.of(copy_body(state={"oops": 1}, conditions=[{"type": 3}], response=[]))
    assert not replicas.settled(garbled), "no state reads as still requested"
    assert placement_plan.source_secret_name(garbled) is None


def test_secret_view_keeps_text_entries_only() -> None:
    view = SecretView.of({"metadata": {"name": "s"}, "data": {"response": "e30=", "bad": 5}, "type": "Opaque"})
    assert (view.meta.name, dict(view.data)) == ("s", {"response": "e30="})
    assert dict(SecretView.of({"data": "garbage"}).data) == {}


def test_sfcluster_view_reads_spec_and_status_and_ignores_the_rest() -> None:
    body = {
        "metadata": {"name": "c2", "namespace": "opbroker", "labels": {"zone": "a"}, "deletionTimestamp": "t"},
        "spec": {
            "secretRef": "c2-kubeconfig",
            "totalCapacity": {"cpu": "4", "memory": "8Gi"},
            "schedulingLimitPercentage": 80,
            "controller": {"image": "opbroker:1"},
            "futureField": True,
        },
        "status": {"reachable": True, "conditions": [{"type": "Ready", "status": "True"}, "junk"]},
    }
    view = SFClusterView.of(body)
    assert (view.secret_ref, view.limit_percentage, view.meta.deleting) == ("c2-kubeconfig", 80, True)
    assert view.declared() is not None and dict(view.controller or {}) == {"image": "opbroker:1"}
    assert [c.type for c in view.conditions] == ["Ready"] and view.has_condition(ConditionType.READY)
    assert view.reported["reachable"] is True and view.wire is body


def test_sfcluster_view_reads_wrong_types_as_absent() -> None:
    view = SFClusterView.of(
        {
            "metadata": {"name": "c3"},
            "spec": {
                "secretRef": ["x"],
                "totalCapacity": "lots",
                "schedulingLimitPercentage": True,
                "controller": "yes",
            },
            "status": {"conditions": {"type": "Ready"}},
        }
    )
    assert (view.secret_ref, view.total_capacity, view.limit_percentage, view.controller) == ("", None, None, None)
    assert view.conditions == () and view.declared() is None
    assert SFClusterView.of({"metadata": {"name": "c4"}, "spec": {"totalCapacity": {"cpu": "many"}}}).declared() is None


def test_a_condition_written_with_an_empty_message_is_not_written_again() -> None:
    """What is written (a condition with message "") reads back through the view as no message: still the same."""
    wanted = replicas.set_condition((), ConditionType.READY, status=False, reason="Unreachable", message="", now=NOW)
    read_back = ReplicaView.of(copy_body(conditions=replicas.wire(wanted))).status.conditions
    assert read_back[0].message is None
    assert replicas.same_conditions(wanted, read_back)
