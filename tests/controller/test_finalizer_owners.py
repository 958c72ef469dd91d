"""One finalizer mechanism, one owner per finalizer (issue 45).

Aspects covered: the table (:data:`~opbroker.controller.core.finalizers.OWNERS`) has one row per kind and names each
reconciler that writes a finalizer as its owner; the executor writes the finalizer the table gives the running
reconciler and refuses — before any request — the finalizer action of a reconciler that owns none on the kind it
runs on; its write is guarded, so a finalizer another controller added meanwhile is never dropped (the write
conflicts: :class:`~opbroker.controller.runtime.outcomes.Conflict`, which the runtime's conflict policy retries);
``abandon`` removes only a finalizer the table lets it, through the owner's executor.
"""

from __future__ import annotations

from typing import Any

import pytest

from opbroker.api.conventions import FINALIZER
from opbroker.controller.catalog.catalog_entries import PlanEntryReconciler, ServiceEntryReconciler
from opbroker.controller.claims.claiming import ClaimReconciler
from opbroker.controller.claims.kinds import CATALOGS, CLAIMS, REGISTERED_SERVICES
from opbroker.controller.claims.registered import RegisteredReconciler
from opbroker.controller.claims.registering import RegistrationReconciler
from opbroker.controller.core import actions as a
from opbroker.controller.core import finalizers
from opbroker.controller.core.finalizers import OWNERS, Held, NotOwner, Owners
from opbroker.controller.core.views import Meta
from opbroker.controller.kinds import BINDINGS, INSTANCES, PLANS, SERVICES
from opbroker.controller.multicluster.clusters import CLUSTERS, ClusterReconciler
from opbroker.controller.osb import abandoning
from opbroker.controller.osb.bindings import BindingReconciler
from opbroker.controller.osb.core import abandon
from opbroker.controller.osb.instances import InstanceReconciler
from opbroker.controller.runtime.executor import Executor, Target
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kind
from opbroker.controller.runtime.outcomes import Conflict
from opbroker.controller.servicecatalog import bindings as servicecatalog_bindings
from opbroker.controller.servicecatalog import instances as servicecatalog_instances
from opbroker.controller.servicecatalog.resources import KINDS
from tests.fake_kube import FakeKube

NS = "tenant"

#: Every reconciler that writes a finalizer, with the kind it reconciles (multi-cluster placement runs inside the
#: instance and binding reconciles, as them).
WRITERS: list[tuple[str, Kind]] = [
    (InstanceReconciler.kind, INSTANCES),
    (BindingReconciler.kind, BINDINGS),
    (PlanEntryReconciler.kind, PLANS),
    (ServiceEntryReconciler.kind, SERVICES),
    (ClusterReconciler.kind, CLUSTERS),
    (ClaimReconciler.kind, CLAIMS),
    (servicecatalog_instances.InstanceReconciler.kind, KINDS["instances"]),
    (servicecatalog_bindings.BindingReconciler.kind, KINDS["bindings"]),
]


@pytest.mark.parametrize(("reconciler", "kind"), WRITERS, ids=[w[0] for w in WRITERS])
def test_each_reconciler_that_writes_a_finalizer_owns_the_one_on_its_kind(reconciler: str, kind: Kind) -> None:
    row = OWNERS.owned(kind.group, kind.plural, reconciler)
    assert row.owner == reconciler and row.finalizer


def test_the_table_covers_exactly_the_writers_and_one_finalizer_per_kind() -> None:
    assert sorted((r.owner, r.group, r.plural) for r in OWNERS.rows) == sorted(
        (owner, kind.group, kind.plural) for owner, kind in WRITERS
    )
    with pytest.raises(ValueError, match="one owner per kind"):
        OWNERS.adding(Held("example.org/second", INSTANCES.group, INSTANCES.plural, "binding", "a second writer"))


@pytest.mark.parametrize(
    ("reason", "reconciler", "kind", "said"),
    [
        ("the instance reconciler on an SFPlan (its second writer before issue 45)", "instance", PLANS, "plan's"),
        ("the binding reconciler on an instance", "binding", INSTANCES, "instance's"),
        ("the plan reconciler on a service", "plan", SERVICES, "service's"),
        ("a reconciler that writes no finalizer, on its kind", RegisteredReconciler.kind, REGISTERED_SERVICES, "no "),
        ("the claims catalog reconciler", "catalog", CATALOGS, "writes no finalizer"),
        (
            "the claims registration reconciler, a second one on SFServiceBindings",
            RegistrationReconciler.kind,
            BINDINGS,
            "binding's",
        ),
    ],
)
def test_the_executor_refuses_a_finalizer_the_running_reconciler_does_not_own(
    reason: str, reconciler: str, kind: Kind, said: str
) -> None:
    kube = FakeKube()
    body = {"metadata": {"name": "x", "namespace": NS, "resourceVersion": "1", "finalizers": ["other.example/keep"]}}
    executor = Executor(Target(kube, kind, reconciler))  # type: ignore[arg-type]
    for present in (True, False):
        with pytest.raises(NotOwner, match=said):
            executor.run(Key(reconciler, NS, "x"), body, [a.EnsureFinalizer(present)])
    assert kube.calls == []  # refused before any request


def created(kube: FakeKube, finalizers_: list[str]) -> dict[str, Any]:
    made = kube.create(
        {
            "apiVersion": "osb.servicefabrik.io/v1alpha1",
            "kind": "SFServiceInstance",
            "metadata": {"name": "db", "namespace": NS, "finalizers": finalizers_},
            "spec": {"planId": "p", "serviceId": "s", "instanceId": "db"},
        }
    )
    assert made is not None
    return made


def test_the_owner_adds_and_removes_its_finalizer_and_keeps_anothers() -> None:
    kube = FakeKube()
    executor = Executor(Target(kube, INSTANCES, "instance"))  # type: ignore[arg-type]
    key = Key("instance", NS, "db")
    body = created(kube, ["other.example/keep"])
    executor.run(key, body, [a.EnsureFinalizer()])
    held = kube.custom_object(INSTANCES, NS, "db")
    assert held is not None and held["metadata"]["finalizers"] == ["other.example/keep", FINALIZER]
    executor.run(key, held, [a.EnsureFinalizer(present=False)])
    left = kube.custom_object(INSTANCES, NS, "db")
    assert left is not None and left["metadata"]["finalizers"] == ["other.example/keep"]


def test_a_finalizer_write_from_a_stale_read_conflicts_instead_of_dropping_anothers() -> None:
    kube = FakeKube()
    stale = created(kube, [])
    kube.patch_custom(INSTANCES, NS, "db", {"metadata": {"finalizers": ["other.example/keep"]}})
    executor = Executor(Target(kube, INSTANCES, "instance"))  # type: ignore[arg-type]
    with pytest.raises(Conflict):
        executor.run(Key("instance", NS, "db"), stale, [a.EnsureFinalizer()])
    live = kube.custom_object(INSTANCES, NS, "db")
    assert live is not None and live["metadata"]["finalizers"] == ["other.example/keep"]


def test_abandon_removes_only_an_abandonable_finalizer_in_its_owners_name() -> None:
    kube = FakeKube()
    assert abandoning.owners_executor(kube, INSTANCES).target.key_kind == "instance"  # type: ignore[arg-type]
    assert abandoning.owners_executor(kube, BINDINGS).target.key_kind == "binding"  # type: ignore[arg-type]
    for kind in (PLANS, SERVICES, CLUSTERS, CLAIMS):
        with pytest.raises(NotOwner):
            abandoning.owners_executor(kube, kind)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reason", "meta", "want"),
    [
        ("held: the owner's removal", {"uid": "u-1", "finalizers": [FINALIZER]}, (a.EnsureFinalizer(False),)),
        ("removed meanwhile", {"uid": "u-1", "finalizers": ["other.example/keep"]}, "not there any more"),
        ("a namesake made since", {"uid": "u-2", "finalizers": [FINALIZER]}, "gone meanwhile"),
    ],
)
def test_abandons_last_step_is_the_finalizer_action(reason: str, meta: dict[str, Any], want: object) -> None:
    assert abandon.finalizer_released(Meta.of(meta), uid="u-1") == want


def test_a_kind_outside_the_controller_adds_its_row() -> None:
    """The table is the controller's; a kind defined elsewhere (a test's) extends a copy of it for its executor."""
    greeting = Held("example.org/hello", "example.org", "greetings", "greeting", "said goodbye first")
    owners: Owners = finalizers.OWNERS.adding(greeting)
    assert owners.owned("example.org", "greetings", "greeting") == greeting
    assert OWNERS.on("example.org", "greetings") is None
