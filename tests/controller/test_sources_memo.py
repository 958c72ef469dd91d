"""The sources map an instance's plan rendered is kept while what it was rendered from holds (``SourcesMemo``):
every evaluation and day-two check asked the ``sources`` template again, one more render each."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog import PlanEntry
from opbroker.controller.core.views import InstanceView
from opbroker.controller.reconciler.keys import Key
from opbroker.controller.rendered import SourcesMemo, sources_inputs

PLAN = PlanEntry({"metadata": {"name": "p"}, "spec": {"id": "p", "serviceId": "s"}}, None, None, "hash-1")
DEPS: Any = SimpleNamespace(catalog=SimpleNamespace(service=lambda _id: None))
KEY = Key("instance", "ns", "i1")
DATABASE = ResourceRef(api_version="demo.opbroker.io/v1alpha1", kind="Database", name="i1", namespace="ns")


def instance(generation: int = 1, labels: dict[str, str] | None = None, status: str = "in progress") -> InstanceView:
    return InstanceView.of(
        {
            "apiVersion": "osb.servicefabrik.io/v1alpha1",
            "kind": "SFServiceInstance",
            "metadata": {
                "name": "i1",
                "namespace": "ns",
                "uid": "u1",
                "generation": generation,
                "labels": labels or {},
            },
            "spec": {"planId": "p", "serviceId": "s"},
            "status": {"state": status},
        }
    )


def test_the_map_is_rendered_once_while_its_inputs_hold_and_again_when_one_moves() -> None:
    memo, renders = SourcesMemo(), []

    def render() -> dict[str, ResourceRef]:
        renders.append(1)
        return {"database": DATABASE}

    def refs(view: InstanceView, registry: dict[str, Any] | None = None, plan: PlanEntry = PLAN) -> Any:
        return memo.refs(KEY, sources_inputs(DEPS, view, plan, registry or {}), render)

    assert refs(instance()) == {"database": DATABASE}
    assert refs(instance(status="succeeded")) == {"database": DATABASE}  # a status write: no render
    assert len(renders) == 1
    refs(instance(generation=2))  # the spec moved
    refs(instance(generation=2, labels={"team": "a"}))  # a label a template may read
    refs(instance(generation=2, labels={"team": "a"}), registry={"password": "generated"})
    refs(instance(generation=2, labels={"team": "a"}), registry={"password": "generated"}, plan=PlanEntry(
        PLAN.body, None, None, "hash-2"))  # fmt: skip
    assert len(renders) == 5
    memo.forget(KEY)
    refs(instance(generation=2, labels={"team": "a"}), registry={"password": "generated"})
    assert len(renders) == 6
