"""What the master writes into sister clusters and copies back: pure functions, no server.

Covers: the copy of an instance (labels, opbroker annotations, master uid, spec verbatim); when a copy's
state may be mirrored; the mirror patch (fields, Ready condition, ClusterReachable) and its emptiness when
nothing changed; the unreachable mark (state kept, no churn); the credentials Secret copy.
"""

from __future__ import annotations

import base64
import dataclasses

from opbroker.api.conventions import CREDENTIALS_KEY, CREDENTIALS_SECRET_TYPE
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import SecretView
from opbroker.controller.multicluster.core import replicas
from opbroker.controller.multicluster.core.views import ReplicaView
from opbroker.controller.multicluster.reasons import ANNOTATION_MASTER_UID, LABEL_REPLICATED, ConditionType
from opbroker.controller.runtime.clock import FAKE_EPOCH as NOW

V = ReplicaView.of


def master_instance(**status: object) -> dict:
    return {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceInstance",
        "metadata": {
            "name": "db1",
            "namespace": "team-a",
            "uid": "uid-master",
            "generation": 2,
            "resourceVersion": "77",
            "labels": {"opbroker.io/plan": "small"},
            "annotations": {
                "opbroker.io/request-identity": "req-1",
                "kubectl.kubernetes.io/last-applied-configuration": "{...}",
                "opbroker.io/cluster": "sister",
            },
            "finalizers": ["opbroker.io/teardown"],
        },
        "spec": {"instanceId": "db1", "planId": "small", "serviceId": "svc", "clusterId": "sister"},
        "status": dict(status),
    }


def copy_with(**status: object) -> dict:
    copy = replicas.copy_of(V(master_instance()))
    copy["metadata"]["generation"] = 1
    copy["status"] = dict(status)
    return copy


def test_copy_keeps_name_spec_and_opbroker_annotations_only() -> None:
    copy = replicas.copy_of(V(master_instance(state="in_queue")))
    assert copy["metadata"] == {
        "name": "db1",
        "namespace": "team-a",
        "labels": {"opbroker.io/plan": "small", LABEL_REPLICATED: "true"},
        "annotations": {"opbroker.io/request-identity": "req-1", ANNOTATION_MASTER_UID: "uid-master"},
    }
    assert copy["spec"] == master_instance()["spec"]
    assert "status" not in copy and "finalizers" not in copy["metadata"]


def test_requested_and_settled() -> None:
    for state in (None, "in_queue", "update"):
        assert replicas.requested(V(master_instance(state=state)))
        assert not replicas.settled(V(copy_with(state=state)))
    for state in ("in progress", "succeeded", "failed", "delete"):
        assert not replicas.requested(V(master_instance(state=state)))
        assert replicas.settled(V(copy_with(state=state)))


def test_mirror_takes_the_copy_status_and_ready_condition() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "Provisioned", "message": "ready", "observedGeneration": 1}
    copy = copy_with(
        state="succeeded",
        description="ready",
        dashboardUrl="https://d/db1",
        appliedPlanHash="h1",
        resources=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}],
        conditions=[ready],
    )
    master = master_instance(state="in progress", description="handed to cluster 'sister'", error=None)
    patch = replicas.mirror(V(master), V(copy), cluster="sister", fields=replicas.INSTANCE_FIELDS, now=NOW)
    assert patch["state"] == "succeeded"
    assert patch["dashboardUrl"] == "https://d/db1" and patch["appliedPlanHash"] == "h1"
    assert "resources" not in patch, "the copy's resources live in the sister; the master does not list them"
    by_type = {c["type"]: c for c in patch["conditions"]}
    assert by_type["Ready"]["status"] == "True" and by_type["Ready"]["observedGeneration"] == 2
    assert by_type["ClusterReachable"]["status"] == "True"
    master["status"].update(patch)
    assert replicas.mirror(V(master), V(copy), cluster="sister", fields=replicas.INSTANCE_FIELDS, now=NOW) == {}, (
        "once mirrored, an idle reconcile writes nothing"
    )


def test_mirror_clears_fields_the_copy_no_longer_has() -> None:
    master = master_instance(state="failed", error="boom")
    patch = replicas.mirror(
        V(master), V(copy_with(state="succeeded")), cluster="s", fields=replicas.INSTANCE_FIELDS, now=NOW
    )
    assert patch["error"] is None and patch["state"] == "succeeded"


def test_unreachable_keeps_the_state_and_is_written_once() -> None:
    master = master_instance(state="succeeded", description="ready")
    patch = replicas.unreachable(
        V(master),
        cluster="sister",
        reason=Reason.CLUSTER_UNREACHABLE,
        message="cluster 'sister' is unreachable: refused",
        now=NOW,
    )
    assert "state" not in patch
    assert patch["description"] == "cluster 'sister' is unreachable: refused; the last known state (succeeded) is kept"
    (condition,) = [c for c in patch["conditions"] if c["type"] == ConditionType.CLUSTER_REACHABLE.value]
    assert (condition["status"], condition["reason"]) == ("False", "ClusterUnreachable")
    master["status"].update(patch)
    assert (
        replicas.unreachable(
            V(master), cluster="sister", reason=Reason.CLUSTER_UNREACHABLE, message=condition["message"], now=NOW
        )
        == {}
    )


def test_condition_transition_time_moves_only_on_a_flip() -> None:
    (made,) = replicas.set_condition((), ConditionType.READY, status=False, reason="A", message="m", now=NOW)
    first = (dataclasses.replace(made, last_transition_time="2000-01-01T00:00:00Z"),)
    same = replicas.set_condition(first, ConditionType.READY, status=False, reason="B", message="n", now=NOW)
    assert same[0].last_transition_time == "2000-01-01T00:00:00Z"
    flipped = replicas.set_condition(first, ConditionType.READY, status=True, reason="A", message="m", now=NOW)
    assert flipped[0].last_transition_time != "2000-01-01T00:00:00Z"


def test_handed_over_says_in_progress_for_this_generation() -> None:
    patch = replicas.handed_over(V(master_instance(state="in_queue", error="old")), cluster="sister", now=NOW)
    assert patch["state"] == "in progress" and patch["error"] is None
    assert patch["observedGeneration"] == 2 and patch["appliedSpec"]["clusterId"] == "sister"


def test_credentials_secret_copies_the_response_only_owned_by_the_master_binding() -> None:
    binding = {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceBinding",
        "metadata": {"name": "b1", "namespace": "team-a", "uid": "uid-b"},
    }
    response = base64.b64encode(b'{"credentials": {"password": "p"}}').decode()
    source = {"data": {CREDENTIALS_KEY: response, "other": "eA=="}, "metadata": {"name": "b1-credentials"}}
    secret = replicas.credentials_secret(V(binding), SecretView.of(source), "b1-credentials")
    assert secret["data"] == {CREDENTIALS_KEY: response}
    assert secret["type"] == CREDENTIALS_SECRET_TYPE
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-b"
    assert secret["metadata"]["namespace"] == "team-a"


def test_a_copy_failing_only_for_a_plan_not_seen_yet_is_not_mirrored() -> None:
    waiting = copy_with(state="failed", conditions=[{"type": "Ready", "status": "False", "reason": "PlanNotFound"}])
    assert not replicas.settled(V(waiting)), "the sister's plan event is on its way: that failure heals itself"
    real = copy_with(state="failed", conditions=[{"type": "Ready", "status": "False", "reason": "Failed"}])
    assert replicas.settled(V(real))


def test_pending_covers_requests_and_unobserved_specs() -> None:
    assert replicas.pending(V(master_instance(state="in_queue", observedGeneration=2)))
    assert replicas.pending(V(master_instance(state="failed", observedGeneration=1))), "a failure that never saw gen 2"
    assert not replicas.pending(V(master_instance(state="failed", observedGeneration=2)))
    assert not replicas.pending(V(master_instance(state="succeeded", observedGeneration=2)))


def test_requested_state_for_the_copy() -> None:
    assert replicas.requested_state(V(master_instance(state="update")), copy_exists=True) == "update"
    assert replicas.requested_state(V(master_instance(state="in_queue")), copy_exists=True) == "in_queue"
    assert replicas.requested_state(V(master_instance(state="failed")), copy_exists=False) == "in_queue"
    assert replicas.requested_state(V(master_instance(state="succeeded")), copy_exists=True) == "update"
