"""The two writers of the shard label, against the fake API (issue 46): the owner's handover inside a reconcile's
read, and shard 0's assigner — each guarded by the resourceVersion it read, each leaving alone what is not its."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from opbroker.api.meta import ResourceRef
from opbroker.api.shards import SHARD_LABEL, Shards, shard_of
from opbroker.controller.catalog.catalog import Catalog
from opbroker.controller.kinds import BINDINGS, INSTANCES
from opbroker.controller.osb.reconciling import Deps
from opbroker.controller.osb.registries import RegistryCache
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.outcomes import DONE
from opbroker.controller.runtime.sources import SourceIndex
from opbroker.controller.settings import ControllerSettings
from opbroker.controller.shards import handover
from opbroker.controller.shards.assigner import BindingAssigner, InstanceAssigner
from opbroker.rendering import Renderer
from tests.fake_kube import GROUP_VERSION, FakeKube, KindInfo

pytestmark = pytest.mark.unit

NS = "team-a"
LEASE_SECONDS = 15


def kube() -> FakeKube:
    fake = FakeKube()
    fake.register_kind(KindInfo("coordination.k8s.io/v1", "Lease", "leases", custom=False))
    return fake


def instance(fake: FakeKube, name: str, shard: str | None = None) -> dict[str, Any]:
    labels = {SHARD_LABEL: shard} if shard is not None else {}
    body = {
        "apiVersion": GROUP_VERSION,
        "kind": "SFServiceInstance",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {},
    }
    created = fake.create(body)
    assert created is not None
    return created


def binding(fake: FakeKube, name: str, instance_name: str) -> None:
    spec = {"id": name, "instanceId": instance_name, "serviceId": "s", "planId": "p"}
    fake.create(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "SFServiceBinding",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }
    )


def label(fake: FakeKube, plural: str, name: str) -> str | None:
    kind = INSTANCES if plural == "instances" else BINDINGS
    found = fake.custom_object(kind, NS, name)
    assert found is not None
    value: str | None = (found["metadata"].get("labels") or {}).get(SHARD_LABEL)
    return value


def on(shard: int, count: int, prefix: str = "db") -> str:
    return next(f"{prefix}-{n}" for n in range(1000) if shard_of(NS, f"{prefix}-{n}", count) == shard)


def lease(fake: FakeKube, shard: int, *, renewed: datetime.datetime, holder: str = "pod-x") -> None:
    micro = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    spec = {"holderIdentity": holder, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro}
    fake.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": f"opbroker-controller-shard-{shard}", "namespace": "opbroker"},
            "spec": spec,
        }
    )


def assigners(
    fake: FakeKube, clock: FakeClock, count: int = 3, rendered: Any = None
) -> tuple[InstanceAssigner, BindingAssigner]:
    options: dict[str, Any] = {"namespace": "opbroker", "lease": "opbroker-controller", "lease_seconds": 15.0}
    options["rendered"] = rendered
    shards = Shards(count, 0)
    return (
        InstanceAssigner(fake, shards, clock=clock, **options),  # type: ignore[arg-type]
        BindingAssigner(fake, shards, clock=clock, **options),  # type: ignore[arg-type]
    )


def test_the_owner_keeps_its_own_hands_over_what_belongs_elsewhere_and_never_touches_anothers() -> None:
    fake = kube()
    shards = Shards(4, 1)
    home, away = on(1, 4), on(3, 4, "other")
    for name, shard in ((home, "1"), (away, "1"), ("theirs", "2")):
        instance(fake, name, shard)
    writes = len(fake.writes())

    def keeps(name: str) -> bool:
        body = fake.custom_object(INSTANCES, NS, name)
        assert body is not None
        return handover.keeps(fake, shards, INSTANCES, body, name)  # type: ignore[arg-type]

    assert keeps(home) and len(fake.writes()) == writes
    assert not keeps("theirs") and len(fake.writes()) == writes  # another shard's: nothing written
    assert not keeps(away) and label(fake, "instances", away) == "3"  # handed over to where the rule puts it
    assert keeps(home) and not keeps(away)  # the new label read: it is no longer this shard's


def test_a_handover_read_before_another_write_is_refused_not_forced() -> None:
    fake = kube()
    away = on(3, 4)
    read = instance(fake, away, "1")
    fake.patch_custom(INSTANCES, NS, away, {"metadata": {"labels": {"team": "a"}}})  # moved on since the read
    with pytest.raises(ApiException) as refused:
        handover.keeps(fake, Shards(4, 1), INSTANCES, read, away)  # type: ignore[arg-type]
    assert refused.value.status == 409
    assert label(fake, "instances", away) == "1"


def config_map(fake: FakeKube, name: str, shard: str | None, stamp: str | None) -> ResourceRef:
    labels = {SHARD_LABEL: shard} if shard is not None else {}
    annotations = {ANNOTATION_OWNER_UID: stamp} if stamp is not None else {}
    meta = {"name": name, "namespace": NS, "labels": labels, "annotations": annotations}
    fake.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    return ResourceRef(api_version="v1", kind="ConfigMap", name=name, namespace=NS)


def labels_of(fake: FakeKube, name: str) -> Any:
    return ((fake.object("v1", "ConfigMap", NS, name) or {}).get("metadata") or {}).get("labels")


def test_the_assigner_moves_an_unlabelled_owners_objects_along_before_placing_it() -> None:
    """An instance made before the controller was sharded: its objects carry no shard label (every shard's watch
    follows them); placing it moves them to its shard, as its handover would."""
    fake, clock = kube(), FakeClock()
    name = on(2, 3)
    owner = instance(fake, name)
    ours = config_map(fake, "ours", None, owner["metadata"]["uid"])
    other = config_map(fake, "shared", None, None)
    asked: list[tuple[Any, str]] = []

    def rendered(kind: Any, body: dict[str, Any]) -> list[tuple[FakeKube, list[ResourceRef]]]:
        asked.append((kind, body["metadata"]["name"]))
        return [(fake, [ours, other])]

    placing, _ = assigners(fake, clock, rendered=rendered)
    assert placing.reconcile(Key("shard-instance", NS, name)) == DONE
    assert asked == [(INSTANCES, name)]
    assert labels_of(fake, "ours") == {SHARD_LABEL: "2"} and labels_of(fake, "shared") == {}
    assert label(fake, "instances", name) == "2"


def test_a_handover_moves_the_owners_rendered_objects_first_and_nothing_else() -> None:
    fake = kube()
    shards = Shards(4, 1)
    away = on(3, 4)
    owner = instance(fake, away, "1")
    uid = owner["metadata"]["uid"]
    ours = config_map(fake, "ours", "1", uid)
    recorded = [ours, config_map(fake, "a-tenants", "1", "another-uid"), config_map(fake, "singleton", None, None)]
    recorded.append(ResourceRef(api_version="v1", kind="ConfigMap", name="gone", namespace=NS))
    writer = fake.acting_as("system:serviceaccount:opbroker:plan-account")

    assert not handover.keeps(fake, shards, INSTANCES, owner, away, lambda: [(writer, recorded)])  # type: ignore[arg-type]
    labels = {
        ref.name: (fake.object("v1", "ConfigMap", NS, ref.name) or {}).get("metadata", {}).get("labels")
        for ref in recorded
    }
    assert labels == {"ours": {SHARD_LABEL: "3"}, "a-tenants": {SHARD_LABEL: "1"}, "singleton": {}, "gone": None}
    assert label(fake, "instances", away) == "3"
    moved = [call for call in fake.writes("patch") if call.name in ("ours", away)]
    assert [call.name for call in moved] == ["ours", away]  # its object first, the owner last


def test_a_handover_whose_object_cannot_be_moved_leaves_the_owner_where_it_is() -> None:
    fake = kube()
    away = on(3, 4)
    owner = instance(fake, away, "1")
    meta = {"name": "ours", "namespace": NS, "labels": {SHARD_LABEL: "1"}}
    meta["annotations"] = {ANNOTATION_OWNER_UID: owner["metadata"]["uid"]}
    fake.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    ref = ResourceRef(api_version="v1", kind="ConfigMap", name="ours", namespace=NS)
    stale = fake.get(ref)
    fake.merge_patch(ref, {"data": {"changed": "since"}})  # moved on since the read the move decides on

    class Stale:
        """The plan's account reading the version before the change (a copy behind)."""

        def get(self, _ref: ResourceRef) -> dict[str, Any] | None:
            return stale

        def merge_patch(self, ref: ResourceRef, patch: dict[str, Any]) -> dict[str, Any] | None:
            return fake.merge_patch(ref, patch)

    with pytest.raises(ApiException) as refused:
        handover.keeps(fake, Shards(4, 1), INSTANCES, owner, away, lambda: [(Stale(), [ref])])  # type: ignore[arg-type,return-value]
    assert refused.value.status == 409
    assert label(fake, "instances", away) == "1"  # still this shard's: retried, never handled by two


def test_the_assigner_labels_a_tenants_own_instance_and_binding_with_the_rule() -> None:
    fake, clock = kube(), FakeClock()
    instances, bindings = assigners(fake, clock)
    instance(fake, "mine")
    binding(fake, "b-mine", "mine")
    assert instances.reconcile(Key("shard-instance", NS, "mine")) == DONE
    assert bindings.reconcile(Key("shard-binding", NS, "b-mine")) == DONE
    want = str(shard_of(NS, "mine", 3))
    assert label(fake, "instances", "mine") == want and label(fake, "bindings", "b-mine") == want


def test_a_removed_shards_object_waits_for_its_lease_to_lapse() -> None:
    fake, clock = kube(), FakeClock()
    instances, _ = assigners(fake, clock)
    instance(fake, "left", "5")  # shard 5 of a larger count, still running
    lease(fake, 5, renewed=clock.now() - datetime.timedelta(seconds=3))
    outcome = instances.reconcile(Key("shard-instance", NS, "left"))
    assert outcome.requeue_after == 15.0 and label(fake, "instances", "left") == "5"
    clock.advance(LEASE_SECONDS)  # not renewed for a whole lease: that shard is gone
    assert instances.reconcile(Key("shard-instance", NS, "left")) == DONE
    assert label(fake, "instances", "left") == str(shard_of(NS, "left", 3))


def test_the_assigner_leaves_a_current_shards_object_alone() -> None:
    fake, clock = kube(), FakeClock()
    instances, _ = assigners(fake, clock)
    name = on(2, 3)
    instance(fake, name, "1")  # the owner moves it, not the assigner
    writes = len(fake.writes())
    assert instances.reconcile(Key("shard-instance", NS, name)) == DONE
    assert len(fake.writes()) == writes and label(fake, "instances", name) == "1"


def test_a_handed_over_owner_leaves_no_copy_of_its_registry_behind() -> None:
    """The shard that hands an instance over forgets its registry: the new shard may rewrite it (a render's values, a
    bind's generated credentials), and a copy kept here would be written back over them if the instance came back."""
    fake = kube()
    deps = Deps(
        fake,  # type: ignore[arg-type]
        Catalog(),
        Renderer(),
        ControllerSettings(shards=Shards(4, 1)),
        SourceIndex(),
        None,  # type: ignore[arg-type]
    )
    home, away = on(1, 4), on(3, 4, "other")
    bodies = {name: instance(fake, name, "1") for name in (home, away)}
    for name, body in bodies.items():
        deps.registries.save(fake, deps.registry_of(INSTANCES, body), {"password": name}, {})  # type: ignore[arg-type]
    fake.calls.clear()

    assert deps.keeps(INSTANCES, bodies[home], home) and not deps.keeps(INSTANCES, bodies[away], away)
    for name, body in bodies.items():  # both rewritten elsewhere (the new shard's render, say)
        RegistryCache().save(fake, deps.registry_of(INSTANCES, body), {"password": f"{name}-rotated"}, {})  # type: ignore[arg-type]
    home_registry = deps.registries.load(fake, deps.registry_of(INSTANCES, bodies[home]), legacy=fake)  # type: ignore[arg-type]
    away_registry = deps.registries.load(fake, deps.registry_of(INSTANCES, bodies[away]), legacy=fake)  # type: ignore[arg-type]
    assert home_registry == {"password": home}  # its own, kept: the copy (only its shard writes it)
    assert away_registry == {"password": f"{away}-rotated"}  # handed over: read again, as the other shard left it
