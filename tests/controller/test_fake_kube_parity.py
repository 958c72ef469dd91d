"""FakeKube answers every call of the one Kubernetes door (controller/runtime/kube.py), with the same parameters: a
kind's act that runs on the real door runs on the fake in its table tests (placement's sister calls, the rollouts'
pages, the lease release included)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from opbroker.controller.kinds import INSTANCES
from opbroker.controller.runtime.kube import Kube
from tests.fake_kube import FakeKube

METHODS = sorted(name for name, _ in inspect.getmembers(Kube, inspect.isfunction) if not name.startswith("_"))


@pytest.mark.parametrize("name", METHODS)
def test_the_fake_has_the_door_s_method(name: str) -> None:
    fake = getattr(FakeKube, name, None)
    assert fake is not None, f"FakeKube lacks {name}"
    assert list(inspect.signature(fake).parameters) == list(inspect.signature(getattr(Kube, name)).parameters)


def instance(name: str) -> dict[str, Any]:
    return {
        "apiVersion": INSTANCES.api_version,
        "kind": "SFServiceInstance",
        "metadata": {"name": name, "namespace": "t"},
    }


def test_pages_follow_the_continue_token() -> None:
    kube = FakeKube()
    for name in ("a", "b", "c"):
        kube.create_custom(
            INSTANCES,
            {
                "apiVersion": INSTANCES.api_version,
                "kind": "SFServiceInstance",
                "metadata": {"name": name, "namespace": "t"},
            },
        )
    first, token, version = kube.list_custom_page(INSTANCES, "t", limit=2)
    rest, end, _ = kube.list_custom_page(INSTANCES, "t", limit=2, token=token)
    assert [o["metadata"]["name"] for o in first + rest] == ["a", "b", "c"] and end is None and version


def test_a_delete_by_uid_leaves_another_object_of_the_name() -> None:
    kube = FakeKube()
    body = {
        "apiVersion": INSTANCES.api_version,
        "kind": "SFServiceInstance",
        "metadata": {"name": "a", "namespace": "t"},
    }
    kube.create_custom(INSTANCES, body)
    assert kube.delete_custom(INSTANCES, "t", "a", uid="not-this-one") is False
    assert kube.custom_object(INSTANCES, "t", "a") is not None
    uid = kube.custom_object(INSTANCES, "t", "a")["metadata"]["uid"]  # type: ignore[index]
    assert kube.delete_custom(INSTANCES, "t", "a", uid=uid) is True
