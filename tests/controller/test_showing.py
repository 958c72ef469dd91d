"""The runtime shows a failure on its object and takes it back (``runtime.showing``), on a FakeKube (unit)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest
from kubernetes.client.exceptions import ApiException

from opbroker.controller.kinds import INSTANCES
from opbroker.controller.runtime.executor import Executor, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kinds import ObservePlanAct
from opbroker.controller.runtime.outcomes import DONE, Outcome
from opbroker.controller.runtime.runner import Runtime
from opbroker.controller.runtime.showing import ShowsFailuresOnObject
from tests.fake_kube import FakeKube

FORBIDDEN = {
    "message": 'secrets is forbidden: User "system:serviceaccount:team:opbroker" cannot create resource "secrets" in '
    'API group "" in the namespace "team"',
    "reason": "Forbidden",
}


class Flaky(ShowsFailuresOnObject, ObservePlanAct[dict[str, Any], Any]):
    """Fails with ``self.failure`` while it is set; ``self.rewrite`` is the Ready it writes first (a retry's record)."""

    kind: ClassVar[str] = "instance"

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        self.executor = Executor(Target(kube, INSTANCES, self.kind))  # type: ignore[arg-type]
        self.failure: Exception | None = None
        self.rewrite: dict[str, Any] | None = None

    def observe(self, key: Key) -> dict[str, Any] | None:
        return self.kube.get_custom(INSTANCES, key.namespace, key.name)

    @staticmethod
    def plan(facts: dict[str, Any]) -> Sequence[Any]:
        return ()

    def act(self, facts: dict[str, Any], actions: Sequence[Any]) -> Outcome:
        if self.rewrite is not None:
            self.kube.patch_custom_status(INSTANCES, "team", "i", {"conditions": [self.rewrite]})
        if self.failure is not None:
            raise self.failure
        return DONE


def forbidden() -> ApiException:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps(FORBIDDEN)
    return exc


def ready(kube: FakeKube) -> dict[str, Any]:
    body = kube.get_custom(INSTANCES, "team", "i")
    assert body is not None
    (found,) = [c for c in body["status"]["conditions"] if c["type"] == "Ready"]
    return dict(found)


@pytest.fixture
def world() -> tuple[FakeKube, Flaky, Runtime]:
    kube = FakeKube()
    in_progress = {"type": "Ready", "status": "False", "reason": "Binding", "message": "binding"}
    kube.create_custom(
        INSTANCES,
        {
            "apiVersion": "osb.servicefabrik.io/v1alpha1",
            "kind": "SFServiceInstance",
            "metadata": {"name": "i", "namespace": "team"},
        },
    )
    kube.patch_custom_status(INSTANCES, "team", "i", {"conditions": [in_progress]})
    flaky = Flaky(kube)
    runtime = Runtime(workers=1)
    runtime.register(flaky)
    return kube, flaky, runtime


def test_a_failure_is_shown_once_then_taken_back(world: tuple[FakeKube, Flaky, Runtime]) -> None:
    kube, flaky, runtime = world
    key = Key("instance", "team", "i")
    flaky.failure = forbidden()
    for _ in range(3):
        with pytest.raises(ApiException):
            runtime.reconcile_now(key)
    shown = ready(kube)
    assert (shown["status"], shown["reason"]) == ("False", "NamespaceNotOnboarded")
    assert 'namespace "team" is not onboarded' in shown["message"]
    assert [e["reason"] for e in kube.events] == ["NamespaceNotOnboarded"]  # once, not per retry

    flaky.failure = None
    runtime.reconcile_now(key)
    assert (ready(kube)["reason"], ready(kube)["message"]) == ("Binding", "binding")  # as before the failure


def test_a_kinds_rewrite_of_ready_is_followed_by_the_failure_again(world: tuple[FakeKube, Flaky, Runtime]) -> None:
    """A retry that records its request first (Ready "Binding") and then fails again: Ready names the failure
    after it, with no second Event."""
    kube, flaky, runtime = world
    key = Key("instance", "team", "i")
    flaky.failure = forbidden()
    flaky.rewrite = {"type": "Ready", "status": "False", "reason": "Binding", "message": "binding"}
    for _ in range(2):
        with pytest.raises(ApiException):
            runtime.reconcile_now(key)
        assert ready(kube)["reason"] == "NamespaceNotOnboarded"
    assert [e["reason"] for e in kube.events] == ["NamespaceNotOnboarded"]


def test_a_ready_object_keeps_its_condition_and_gets_the_event(world: tuple[FakeKube, Flaky, Runtime]) -> None:
    kube, flaky, runtime = world
    settled = {"type": "Ready", "status": "True", "reason": "Provisioned", "message": "ok"}
    kube.patch_custom_status(INSTANCES, "team", "i", {"conditions": [settled]})
    flaky.failure = forbidden()
    with pytest.raises(ApiException):
        runtime.reconcile_now(Key("instance", "team", "i"))
    assert ready(kube)["reason"] == "Provisioned"
    assert [e["reason"] for e in kube.events] == ["NamespaceNotOnboarded"]
