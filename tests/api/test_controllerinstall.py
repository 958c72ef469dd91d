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


class _SlowKube:
    """Each apply advances a fake clock by 25 s."""

    def __init__(self) -> None:
        self.now = 0.0
        self.applied: list[str] = []

    def apply(self, manifest: dict[str, object], *, field_manager: str) -> dict[str, object]:
        self.now += 25
        self.applied.append(str(manifest["kind"]))
        return manifest


def test_an_installation_gives_up_after_its_time_and_says_how_far_it_got() -> None:
    import pytest

    kube = _SlowKube()
    objects = installer.desired("ops", SFClusterController(image="x"))
    with pytest.raises(installer.InstallError, match=r"gave up after 60s with 3 of \d+ objects applied"):
        installer.install(kube, "ops", objects, clock=lambda: kube.now)  # type: ignore[arg-type]
    assert len(kube.applied) == 3
