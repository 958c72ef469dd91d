"""``ControllerInstalled`` waits for the sister's controller Deployment to be available (issue 47: it said True
while the Deployment was 0/2), and a cluster whose controller does not run is not Ready, with that reason."""

from __future__ import annotations

from typing import Any

import pytest

from opbroker.controller.core.reasons import Reason
from opbroker.controller.multicluster.core.availability import availability
from opbroker.controller.multicluster.core.cluster_plan import ClusterFacts, Installation, cluster_conditions
from opbroker.controller.multicluster.core.views import SFClusterView
from opbroker.controller.multicluster.quantities import Resources
from opbroker.controller.runtime.clock import FAKE_EPOCH as NOW

WHERE = "Deployment opbroker/opbroker-controller"


def deployment(
    replicas: int = 2, *, generation: int = 3, observed: int = 3, available: int = 0, updated: int = 2, **status: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": "opbroker-controller", "generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "availableReplicas": available,
            "updatedReplicas": updated,
            **status,
        },
    }


@pytest.mark.parametrize(
    ("body", "available", "said"),
    [
        (deployment(available=2), True, "2 of 2 replica(s) available"),
        (deployment(available=3, updated=3), True, "3 of 2"),
        (deployment(), False, "0 of 2 replica(s) available, 2 up to date"),
        (deployment(available=1), False, "1 of 2"),
        (deployment(available=2, updated=1), False, "1 up to date"),  # a rollout half done: old pods answer
        (
            deployment(available=2, observed=2),
            False,
            "2 of 2 replica(s) available, 2 up to date (generation 3 not rolled out yet)",
        ),
        (None, False, "is missing in the cluster"),
        (
            deployment(
                conditions=[
                    {
                        "type": "Available",
                        "status": "False",
                        "reason": "MinimumReplicasUnavailable",
                        "message": "Deployment does not have minimum availability.",
                    },
                    {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated", "message": "fine"},
                ]
            ),
            False,
            "(Available: MinimumReplicasUnavailable Deployment does not have minimum availability.)",
        ),
    ],
)
def test_availability_needs_every_replica_of_the_current_spec(
    body: dict[str, Any] | None, available: bool, said: str
) -> None:
    judged = availability(WHERE, body)
    assert judged.available is available
    assert said in judged.message and judged.message.startswith(WHERE)


def test_a_long_condition_message_is_cut() -> None:
    long = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "x" * 2000}]
    assert len(availability(WHERE, deployment(conditions=long)).message) < 500


def _facts(install: Installation) -> ClusterFacts:
    view = SFClusterView.of(
        {
            "apiVersion": "resource.servicefabrik.io/v1alpha1",
            "kind": "SFCluster",
            "metadata": {"name": "eu-2", "namespace": "opbroker", "generation": 1},
            "spec": {"secretRef": "eu-2-kubeconfig", "controller": {"image": "opbroker:1"}},
        }
    )
    return ClusterFacts(
        name="eu-2",
        cluster=view,
        reachable=True,
        reason="",
        observed=None,
        instances=0,
        used=Resources(),
        remaining=None,
        probe_seconds=10,
        install=install,
        now=NOW,
    )


def test_an_unavailable_controller_makes_the_cluster_not_ready_with_the_reason() -> None:
    message = f"image opbroker:1, 2 replica(s): 29 objects applied; {WHERE}: 0 of 2 replica(s) available"
    conditions = {c.type: c for c in cluster_conditions(_facts(Installation(False, "ControllerUnavailable", message)))}
    assert (conditions["ControllerInstalled"].status, conditions["ControllerInstalled"].reason) == (
        "False",
        Reason.CONTROLLER_UNAVAILABLE.value,
    )
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("False", Reason.CONTROLLER_UNAVAILABLE.value)
    assert "0 of 2" in conditions["Ready"].message

    ok = Installation(True, Reason.CONTROLLER_INSTALLED.value, f"...; {WHERE}: 2 of 2 replica(s) available")
    conditions = {c.type: c for c in cluster_conditions(_facts(ok))}
    assert conditions["ControllerInstalled"].status == "True" and conditions["Ready"].status == "True"
