"""A singleton's guarded writes (``controller.singletons``) no longer retry in place: their 409 propagates.

Aspects: a join or leave written on a stale copy raises the 409 (nothing of the other writer's is lost); the door
marks its copy behind, so the repeat — the runtime's reconcile after its conflict policy's wait, or
``abandon``'s re-read — reads the object anew and gets through; the runtime maps that 409 to its one conflict
policy (a re-read and a retry after ``Policies.conflicts``), not to a failure.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import ANNOTATION_SINGLETON_USERS
from opbroker.api.meta import ResourceRef
from opbroker.controller.core import actions as a
from opbroker.controller.core.views import ObjectView
from opbroker.controller.osb import singletons
from opbroker.controller.osb.core import singleton_plan
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.outcomes import Outcome
from opbroker.controller.runtime.policies import Policies
from opbroker.controller.runtime.runner import Runtime
from tests.fake_kube import FakeKube

REF = ResourceRef(api_version="v1", kind="ConfigMap", name="shared", namespace="elsewhere")
CONFIG_MAPS = ("v1", "ConfigMap")


def join(kube: FakeKube, live: dict[str, Any], owner_uid: str) -> None:
    """Join as the product does: the plan decides the guarded write from the copy read, the effect makes it."""
    step = singleton_plan.listing(ObjectView.of(live), REF, owner_uid=owner_uid)
    assert isinstance(step, a.JoinSingleton)
    singletons.perform(kube, step)  # type: ignore[arg-type]


def users_of(kube: FakeKube) -> list[str]:
    found = kube.object("v1", "ConfigMap", "elsewhere", "shared")
    assert found is not None
    return list(json.loads(found["metadata"]["annotations"][ANNOTATION_SINGLETON_USERS]))


def world() -> tuple[FakeKube, dict[str, Any]]:
    """A singleton used by ``a``, fed to the store; then ``b`` joins it behind the store's back: the store's
    copy is one version behind."""
    kube = FakeKube()
    created = kube.create(singletons.tracked({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "shared", "namespace": "elsewhere"}}, "a"))  # fmt: skip
    assert created is not None
    join(kube, created, "b")
    kube.store.feed(CONFIG_MAPS)
    kube.store.put(CONFIG_MAPS, created)  # the watch has not delivered b's write yet
    return kube, created


def test_a_join_on_a_stale_copy_raises_its_conflict_and_the_repeat_reads_anew() -> None:
    kube, stale = world()
    seen = kube.get(REF)
    assert seen is not None and seen["metadata"]["resourceVersion"] == stale["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as refused:
        join(kube, seen, "c")
    assert refused.value.status == 409
    assert users_of(kube) == ["a", "b"]  # b's entry is not lost
    again = kube.get(REF)  # the repeat: the store's copy was marked behind, the read goes past it
    assert again is not None and again["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]
    join(kube, again, "c")
    assert users_of(kube) == ["a", "b", "c"]


def test_a_leave_on_a_stale_copy_raises_its_conflict_and_the_repeat_gets_through() -> None:
    kube, stale = world()
    with pytest.raises(ApiException) as refused:
        singletons.leave(kube, REF, ObjectView.of(stale), "a")  # type: ignore[arg-type]
    assert refused.value.status == 409 and users_of(kube) == ["a", "b"]
    fresh = kube.get(REF)
    assert fresh is not None
    assert singletons.leave(kube, REF, ObjectView.of(fresh), "a") is False  # type: ignore[arg-type]
    assert users_of(kube) == ["b"]


class Joining:
    """A reconcile that joins the singleton from what the door reads (the store first)."""

    kind: ClassVar[str] = "joining"

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        self.rereads = 0

    def reconcile(self, key: Key) -> Outcome:
        live = self.kube.get(REF)
        assert live is not None
        join(self.kube, live, key.name)
        return Outcome()

    def reread(self, key: Key) -> None:
        self.rereads += 1


def test_the_runtime_retries_the_whole_reconcile_on_its_conflict_policy() -> None:
    kube, _ = world()
    policies = Policies(seed=4)
    runtime = Runtime(workers=1, policies=policies)
    reconciler = Joining(kube)
    runtime.register(reconciler)
    key = Key("joining", "elsewhere", "c")
    first = runtime.reconcile_now(key)
    conflicts = policies.conflicts
    assert first.requeue_after is not None and reconciler.rereads == 1  # a conflict, not a failure
    assert (1 - conflicts.jitter) * conflicts.base <= first.requeue_after <= conflicts.base
    assert runtime.reconcile_now(key) == Outcome()
    assert users_of(kube) == ["a", "b", "c"]
