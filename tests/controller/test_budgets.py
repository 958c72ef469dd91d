"""Per-namespace budgets (issue 42): the decision, the counts it decides on, the store's byte budget, and what the
instance's and binding's plans do with a refusal — all without a cluster (the tenant test is
``tests/tenancy/test_budgets.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from opbroker.api import TemplateAction
from opbroker.controller.budgets import Budgeting
from opbroker.controller.core import actions as a
from opbroker.controller.core.budgets import NamespaceBudgets, NamespaceUsage, refusal
from opbroker.controller.osb.core.binding_plan import plan as binding_plan
from opbroker.controller.osb.core.instance_plan import plan as instance_plan
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.store import UNKNOWN, ObjectStore
from opbroker.rendering import Renderer, RenderLimitError
from opbroker.rendering.limits import Limits
from tests.controller import test_binding_plan as bindings
from tests.controller import test_instance_plan as instances
from tests.rendering import test_functions as functions

TYPE = ("osb.servicefabrik.io/v1alpha1", "sfserviceinstances")
WHY = "namespace 'team' has 3 operations in progress, its budget of 3: this request starts when one of them ends"


def instance(namespace: str, name: str, *, size: int = 0, version: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": TYPE[0],
        "kind": "SFServiceInstance",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": version},
        "spec": {"parameters": {"pad": "x" * size}},
    }


# -- the decision ---------------------------------------------------------------------------------------------


def test_a_namespace_at_its_operations_budget_is_refused_with_the_counts() -> None:
    budgets = NamespaceBudgets(operations=3, cached_bytes=1000)
    assert refusal(NamespaceUsage("team", 2), budgets) is None
    assert refusal(NamespaceUsage("team", 3), budgets) == WHY
    over = refusal(NamespaceUsage("team", 0, over_cache=True), budgets)
    assert over is not None and "budget of 1000 bytes" in over
    assert refusal(NamespaceUsage("team", 10_000, over_cache=True), NamespaceBudgets(0, 0)) is None  # 0: unbounded


def test_the_ledger_counts_operations_in_progress_per_namespace_without_the_askers_own() -> None:
    ledger = Budgeting(NamespaceBudgets(operations=2, cached_bytes=0), exempt=("opbroker",))
    first, second, third = (Key("instance", "team", n) for n in ("a", "b", "c"))
    ledger.observe(first, "in progress")
    ledger.observe(Key("binding", "team", "a"), "in progress")  # a binding's operation counts too
    assert ledger.refusal(third) is not None
    assert ledger.refusal(first) is None  # its own operation is not held against it
    assert ledger.refusal(Key("instance", "victim", "x")) is None  # another namespace's count is its own
    ledger.observe(first, "succeeded")
    assert ledger.refusal(third) is None
    ledger.observe(Key("binding", "team", "a"), None)  # gone
    assert ledger.in_progress("team") == 0
    assert not ledger._in_progress  # a quiet namespace leaves no entry behind
    for name in "abc":
        ledger.observe(Key("instance", "opbroker", name), "in progress")
    assert ledger.refusal(Key("instance", "opbroker", "d")) is None  # the control plane's namespace is exempt
    ledger.note(second, [a.WriteStatus({"state": "in progress"}), a.Continue()])
    assert ledger.in_progress("team") == 1  # a reconcile's own in-progress write counts before its event


# -- the store's byte budget ------------------------------------------------------------------------------------


def test_bodies_past_a_namespaces_budget_are_not_held_and_the_namespace_is_over() -> None:
    store = ObjectStore(namespace_bytes=10_000, exempt=("opbroker",))
    store.feed(TYPE)
    for index in range(5):
        store.put(TYPE, instance("team", f"i{index}", size=3_000))
    held, refused = store.namespace_bytes("team")
    assert held <= 10_000 and refused > 0
    assert store.over_budget("team")
    assert store.lookup(TYPE, "team", "i4") is UNKNOWN  # known by version: read from the API server
    assert store.version_of(TYPE, "team", "i4") == "1"
    assert isinstance(store.lookup(TYPE, "team", "i0"), dict)
    store.put(TYPE, instance("victim", "v", size=3_000))
    assert isinstance(store.lookup(TYPE, "victim", "v"), dict) and not store.over_budget("victim")
    for index in range(20):
        store.put(TYPE, instance("opbroker", f"p{index}", size=3_000))
    assert not store.over_budget("opbroker")  # exempt: the platform's own
    for index in range(3):
        store.remove(TYPE, instance("team", f"i{index}", version="2"))
    assert not store.over_budget("team")  # what is left fits again
    for index in range(3, 5):
        store.remove(TYPE, instance("team", f"i{index}", version="2"))
    assert store.namespace_bytes("team") == (0, 0)
    assert store.counted() == store.census()


def test_a_budgeting_over_the_stores_budget_refuses_new_operations() -> None:
    store = ObjectStore(namespace_bytes=1_000)
    store.feed(TYPE)
    store.put(TYPE, instance("team", "big", size=5_000))
    ledger = Budgeting(NamespaceBudgets(operations=10, cached_bytes=1_000), store=store)
    why = ledger.refusal(Key("instance", "team", "new"))
    assert why is not None and "budget of 1000 bytes" in why


# -- what the plans do with a refusal ------------------------------------------------------------------------


def test_a_new_instance_past_the_budget_waits_saying_why_and_renders_nothing() -> None:
    facts = instances.facts(instances.body(state="in_queue"), over_budget=WHY)
    actions = instance_plan(facts)
    assert instances.summary(actions) == [
        ("status", "in_queue", "NamespaceBudgetExceeded", "guarded", ("event", "NamespaceBudgetExceeded", True)),
        ("requeue", 30.0),
    ]
    write = actions[0]
    assert isinstance(write, a.WriteStatus) and write.patch["description"] == WHY
    assert not any(isinstance(action, a.Apply) for action in actions)


def test_a_waiting_instance_is_not_written_again_at_each_look() -> None:
    waiting = instances.body(state="in_queue")
    waiting["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "NamespaceBudgetExceeded"}]
    assert instances.summary(instance_plan(instances.facts(waiting, over_budget=WHY))) == [("requeue", 30.0)]


def test_an_operation_in_progress_and_a_deprovision_are_never_held_back() -> None:
    running = instances.facts(instances.body(state="in progress"), over_budget=WHY, rendering=instances.RENDERED)
    assert not any("NamespaceBudgetExceeded" in str(row) for row in instances.summary(instance_plan(running)))
    deleting = instances.body(state="succeeded", deleting=True, observed=1)
    report = instances.Report(True, instances.SUCCEEDED)
    going = instances.facts(deleting, over_budget=WHY, teardown=instances.Teardown(False), report=report)
    assert not any("NamespaceBudgetExceeded" in str(row) for row in instances.summary(instance_plan(going)))


def test_a_new_binding_past_the_budget_waits_saying_why() -> None:
    actions = binding_plan(bindings.facts(bindings.binding(state="in_queue"), over_budget=WHY))
    write = actions[0]
    assert isinstance(write, a.WriteStatus)
    assert write.patch["state"] == "in_queue" and write.patch["description"] == WHY
    assert isinstance(actions[-1], a.Requeue) and not any(isinstance(x, a.Apply) for x in actions)


# -- objects per render -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "refused"), [(8, False), (9, True)])
def test_a_render_writes_at_most_max_objects(count: int, refused: bool) -> None:
    template = (
        "{% for i in range(instance.spec.parameters.n) %}---\napiVersion: v1\nkind: ConfigMap\n"
        "metadata: {name: c{{ i }}}\n{% endfor %}"
    )
    plan = functions.make_plan(("provision", template))
    instance = {**functions.INSTANCE, "spec": {**functions.INSTANCE["spec"], "parameters": {"n": count}}}
    inputs = functions.inputs(instance=instance)
    renderer = Renderer(limits=Limits(max_objects=8))
    if refused:
        with pytest.raises(RenderLimitError, match="rendered 9 objects, over the limit of 8"):
            renderer.render_objects(plan, TemplateAction.PROVISION, inputs)
    else:
        assert len(renderer.render_objects(plan, TemplateAction.PROVISION, inputs).objects) == 8


# -- the Service Catalog's Instances and Bindings ------------------------------------------------------------------


def test_a_service_catalog_instance_or_binding_past_the_budget_asks_its_broker_nothing() -> None:
    from opbroker.controller.servicecatalog.core import binding_plan as sc_binding
    from opbroker.controller.servicecatalog.core import instance_plan as sc_instance
    from opbroker.controller.servicecatalog.core.calls import Call
    from tests.servicecatalog import test_plans as sc

    for actions in (
        sc_instance.plan(sc.facts(sc.obj(), over_budget=WHY)),
        sc_binding.plan(sc.bfacts(sc.binding(), over_budget=WHY)),
    ):
        assert not [x for x in actions if isinstance(x, Call)]
        write, again = actions
        assert isinstance(write, a.WriteStatus) and isinstance(again, a.Requeue)
        assert write.patch["conditions"][0]["reason"] == "NamespaceBudgetExceeded"
        assert write.event is not None and write.event.message == WHY
    said = [sc.ready("False", sc.Reason.NAMESPACE_BUDGET_EXCEEDED, "counted before")]
    assert sc_instance.plan(sc.facts(sc.obj(conditions=said), over_budget=WHY)) == [a.Requeue(30.0)]
    running = sc.facts(sc.obj(asyncOpInProgress=True, operationStartTime=sc.STAMP), over_budget=WHY)
    assert sc_instance.next_step(running) is sc_instance.Step.POLL  # what runs goes on
    going = sc.facts(sc.obj(deleting=True, deprovisionStatus="Required"), over_budget=WHY)
    assert sc_instance.next_step(going) is sc_instance.Step.DEPROVISION  # and what gives back is never held
    assert [c for c in sc_instance.plan(sc.facts(sc.obj())) if isinstance(c, Call)]  # within budget: it asks
