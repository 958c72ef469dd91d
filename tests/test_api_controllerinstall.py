"""The controller's in-cluster objects as plain data (issue 29): one source for the ControlPlane component and
the master's installer into sister clusters."""

from __future__ import annotations

from opbroker.api.cluster import SFClusterController
from opbroker.api.controllerinstall import ControllerSpec, controller_objects, digest
from opbroker.controller.multicluster import installer


def test_the_objects_follow_the_settings_and_the_digest_sees_an_image_change() -> None:
    one = controller_objects(ControllerSpec(namespace="ops", image="img:1"))
    two = controller_objects(ControllerSpec(namespace="ops", image="img:2"))
    roles = [role for role, _ in one]
    assert roles.index("controller-cluster-role") < roles.index("controller-cluster-role-binding")
    assert roles[-2:] == ["controller-deployment", "controller-disruption-budget"]
    assert digest(one) != digest(two)
    assert digest(one) == digest(controller_objects(ControllerSpec(namespace="ops", image="img:1")))
    without = dict(controller_objects(ControllerSpec(namespace="ops", image="img:1", webhook=False)))
    assert "webhook-configuration" not in without
    assert (
        "--webhook-port" not in without["controller-deployment"]["spec"]["template"]["spec"]["containers"][0]["command"]
    )


def test_removal_covers_every_object_any_installation_makes() -> None:
    removable = {(m["kind"], m["metadata"]["name"]) for _, m in installer.removable("ops")}
    for webhook in (True, False):
        wanted = installer.desired("ops", SFClusterController(image="x", webhook=webhook, replicas=3))
        assert {(m["kind"], m["metadata"]["name"]) for _, m in wanted} <= removable
