"""The Service Catalog's Kubernetes edge through the one door, on ``FakeKube``: ``CatalogApi`` (both scopes,
guarded writes, conflicts) and the Instance and Binding reconcilers running the OSB operation protocol against
the fake broker over HTTP — time faked (the poll clock and the wall clock are passed in), no control plane."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from opbroker import osbclient
from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.api.servicecatalog import Binding, Broker, Instance, ServiceClass
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.memory import Memories
from opbroker.controller.runtime.outcomes import Conflict, Outcome
from opbroker.controller.runtime.policies import DEFAULTS, Policies
from opbroker.controller.servicecatalog import bindings, brokers, instances
from opbroker.controller.servicecatalog.core.relisting import BROKER_LABEL
from opbroker.controller.servicecatalog.resources import (
    BINDINGS,
    BROKERS,
    CLASSES,
    FINALIZER,
    INSTANCES,
    KINDS,
    CatalogApi,
)
from tests.fake_kube import FakeKube
from tests.osb_fake_broker import PLAN_ASYNC, PLAN_ASYNC_BIND, SERVICE_ID, FakeBroker, serve

API_VERSION = f"{Broker.GROUP}/{Broker.VERSION}"
NAMESPACE = "team"
#: The policy table without jitter: the waits these tests assert are exact.
EXACT = Policies().unjittered()


def service_class(name: str = "postgres", broker: str = "fake", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": ServiceClass.KIND,
        "metadata": {"name": name, "labels": {BROKER_LABEL: broker}},
        "externalID": SERVICE_ID,
        "externalName": name,
        "brokerName": broker,
        "plans": [
            {"name": "async", "externalID": PLAN_ASYNC, **extra},
            {"name": "async-bind", "externalID": PLAN_ASYNC_BIND, **extra},
        ],
    }


def test_a_relisted_class_is_written_over_only_at_the_version_read() -> None:
    held = {**service_class(), "metadata": {"name": "postgres", "resourceVersion": "42"}, "status": {}, "tags": ["a"]}
    patch = brokers._replacement_patch({**held, "tags": None, "description": "new"})
    assert patch["metadata"] == {"resourceVersion": "42"} and patch["description"] == "new"
    assert patch["tags"] is None and patch["requires"] is None and "status" not in patch
    with pytest.raises(ValueError, match="resourceVersion"):
        brokers._replacement_patch(service_class())


# -- CatalogApi: every call through Kube ---------------------------------------------------------------------------


def test_the_catalog_api_reads_and_writes_both_scopes_through_the_one_door() -> None:
    kube = FakeKube()  # it has no CustomObjectsApi: a direct client call would fail here
    api = CatalogApi(kube)
    created = api.create(CLASSES, service_class())
    assert created["metadata"]["resourceVersion"]
    read = api.get(CLASSES, "ignored-for-a-cluster-scoped-kind", "postgres")
    assert read is not None and read["externalID"] == SERVICE_ID and "namespace" not in read["metadata"]
    assert [c["metadata"]["name"] for c in api.list(CLASSES, label_selector=f"{BROKER_LABEL}=fake")] == ["postgres"]
    assert api.list(CLASSES, label_selector=f"{BROKER_LABEL}=other") == []
    assert api.get(CLASSES, "", "missing") is None and api.get(BROKERS, "", "missing") is None
    with pytest.raises(Conflict):
        api.create(CLASSES, service_class())  # it exists: the runtime re-reads and reconciles again

    stale = api.get(CLASSES, "", "postgres")
    assert stale is not None
    api.patch_status(CLASSES, read, {"removedFromBrokerCatalog": True})  # guarded by the version read
    assert read["status"] == {"removedFromBrokerCatalog": True}  # the caller's copy is the answer
    assert read["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]
    with pytest.raises(Conflict):  # a stale copy cannot undo the newer write...
        api.patch_status(CLASSES, stale, {"removedFromBrokerCatalog": False})
    api.patch_status(CLASSES, stale, {"removedFromBrokerCatalog": False}, guarded=False)  # ...unless unguarded
    unversioned = {**stale, "metadata": {"name": "postgres"}}
    with pytest.raises(ValueError, match="resourceVersion"):  # a guarded write needs the version read: none sent
        api.patch_status(CLASSES, unversioned, {"removedFromBrokerCatalog": True})
    with pytest.raises(Conflict):
        api.patch(CLASSES, "", "postgres", {"metadata": {"resourceVersion": "1"}, "externalName": "pg"})
    assert api.patch(CLASSES, "", "missing", {"externalName": "x"}) is None

    api.create(INSTANCES, instance_body())
    assert api.get(INSTANCES, NAMESPACE, "db") is not None and api.get(INSTANCES, "elsewhere", "db") is None
    assert [i["metadata"]["name"] for i in api.list(INSTANCES, NAMESPACE)] == ["db"]
    assert api.list(INSTANCES, "elsewhere") == [] and len(api.list(INSTANCES)) == 1
    assert [(c.verb, c.kind) for c in kube.writes()] == [
        ("create", "ServiceClass"),
        ("create", "ServiceClass"),
        ("patch_status", "ServiceClass"),
        ("patch_status", "ServiceClass"),
        ("patch_status", "ServiceClass"),
        ("patch", "ServiceClass"),
        ("patch", "ServiceClass"),
        ("create", "Instance"),
    ]


def instances_kind() -> Any:
    from opbroker.controller.servicecatalog.resources import KINDS

    return KINDS[INSTANCES]


# -- the protocol end to end on FakeKube ---------------------------------------------------------------------------


def instance_body(name: str = "db", plan: str = "async", **parameters: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"serviceClassName": "postgres", "planName": plan}
    if parameters:
        spec["parameters"] = parameters
    return {
        "apiVersion": API_VERSION,
        "kind": Instance.KIND,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


@dataclass
class World:
    kube: FakeKube
    api: CatalogApi
    broker: FakeBroker
    instances: instances.InstanceReconciler
    bindings: bindings.BindingReconciler
    clock: FakeClock
    """The reconcilers' clock (polls due, ``operationStartTime``, deadlines), advanced instead of sleeping."""

    def instance(self, name: str = "db") -> dict[str, Any]:
        found = self.api.get(INSTANCES, NAMESPACE, name)
        assert found is not None
        return found

    def status(self, name: str = "db") -> dict[str, Any]:
        return self.instance(name).get("status") or {}

    def condition(self, kind: str, name: str = "db", plural: str = INSTANCES) -> dict[str, Any] | None:
        body = self.api.get(plural, NAMESPACE, name) or {}
        return next((c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)

    def run(self, key: Key, *, times: int = 1) -> list[Outcome]:
        """Reconcile ``key`` ``times`` times, letting each requeue's time pass (both clocks) in between."""
        reconciler = self.instances if key.kind == instances.InstanceReconciler.kind else self.bindings
        outcomes = []
        for _ in range(times):
            outcome = reconciler.reconcile(key)
            outcomes.append(outcome)
            self.tick(outcome.requeue_after or 0.0)
        return outcomes

    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def polls(self) -> int:
        return len(self.broker.calls("GET", "/last_operation"))


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    broker = FakeBroker(serves_fetch=True)  # day two: a settled instance of a retrievable class is fetched
    kube = FakeKube()
    api = CatalogApi(kube)
    clock = FakeClock(wall=datetime(2026, 1, 1, tzinfo=UTC))
    with serve(broker) as url:
        credentials = {"username": broker.username, "password": broker.password}
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "fake-auth", "namespace": DEFAULT_NAMESPACE},
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in credentials.items()},
            }
        )
        secret_ref = {"namespace": DEFAULT_NAMESPACE, "name": "fake-auth"}
        api.create(
            BROKERS,
            {
                "apiVersion": API_VERSION,
                "kind": Broker.KIND,
                "metadata": {"name": "fake"},
                "spec": {"url": url, "authInfo": {"basic": {"secretRef": secret_ref}}},
            },
        )
        api.create(CLASSES, service_class())
        memories = Memories()
        w = World(
            kube,
            api,
            broker,
            instances.InstanceReconciler(api, memories, max_operation_seconds=3600, clock=clock, policies=EXACT),
            bindings.BindingReconciler(api, memories, max_operation_seconds=3600, clock=clock, policies=EXACT),
            clock,
        )
        yield w


INSTANCE = Key(instances.InstanceReconciler.kind, NAMESPACE, "db")
BINDING = Key(bindings.BindingReconciler.kind, NAMESPACE, "creds")


def test_an_accepted_provision_is_recorded_first_then_polled_to_provisioned(world: World) -> None:
    world.api.create(INSTANCES, instance_body())
    world.run(INSTANCE)  # the finalizer
    (provision,) = world.run(INSTANCE)
    assert provision.requeue_after == 1.0  # the first poll after the pacing's base
    status = world.status()
    assert len(world.broker.calls("PUT", f"/v2/service_instances/{status['externalID']}")) == 1  # the id recorded
    assert status["asyncOpInProgress"] is True and status["currentOperation"] == "Provision"
    assert status["lastOperation"] == world.broker.instances[status["externalID"]].operation.id
    assert status["operationStartTime"] == "2026-01-01T00:00:00Z"
    world.run(INSTANCE, times=3)  # in progress twice (backoff 1 s, then 2 s), then succeeded
    assert world.polls() == 3
    status = world.status()
    assert status["provisionStatus"] == "Provisioned" and status["asyncOpInProgress"] is False
    assert status.get("currentOperation") is None and status["observedGeneration"] == 1
    assert status["externalProperties"]["planExternalID"] == PLAN_ASYNC
    assert world.condition("Ready") is not None and world.condition("Ready")["status"] == "True"  # type: ignore[index]
    assert world.run(INSTANCE)[0].requeue_after is None and world.polls() == 3  # settled: nothing more is asked


def test_a_settled_instance_of_a_retrievable_class_is_fetched_once_per_resync(world: World) -> None:
    """Day two (``core.live``) through the reconciler and its effects: the first look one period after it is seen
    settled, one GET per period however often it is woken, the answer shown in Ready."""
    world.api.patch(CLASSES, "", "postgres", {"instancesRetrievable": True})
    world.api.create(INSTANCES, instance_body())
    world.run(INSTANCE, times=5)  # finalizer, provision, three polls: provisioned
    external_id = world.status()["externalID"]

    def fetches() -> int:
        return len([r for r in world.broker.calls("GET") if r.path == f"/v2/service_instances/{external_id}"])

    period = world.instances.reconcile(INSTANCE).requeue_after  # seen settled: the first look one period on
    assert period is not None and 540 <= period <= 660 and fetches() == 0
    world.broker.instances[external_id].attributes = {"ready": "false", "message": "disk full"}
    world.tick(100)
    assert world.instances.reconcile(INSTANCE).requeue_after == pytest.approx(period - 100)  # woken early: it waits
    assert fetches() == 0
    world.tick(period - 100)
    assert world.instances.reconcile(INSTANCE).requeue_after == pytest.approx(period) and fetches() == 1
    ready = world.condition("Ready")
    assert ready is not None and (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "BrokerReportsUnready",
        "disk full",
    )
    assert world.status()["provisionStatus"] == "Provisioned"  # the operation's history kept
    world.instances.reconcile(INSTANCE)  # its own write's watch event: no second GET this period
    assert fetches() == 1
    del world.broker.instances[external_id]
    world.tick(period)
    world.instances.reconcile(INSTANCE)
    ready = world.condition("Ready")
    assert fetches() == 2 and ready is not None and ready["reason"] == "GoneAtBroker"


def test_a_poll_is_not_made_before_its_time_and_retry_after_is_honoured(world: World) -> None:
    world.broker.retry_after = 20
    world.broker.polls = 5
    world.api.create(INSTANCES, instance_body())
    world.run(INSTANCE, times=2)  # finalizer, provision accepted
    first = world.instances.reconcile(INSTANCE)  # in progress, Retry-After: 20 (not the backoff's 1 s)
    assert world.polls() == 1 and first.requeue_after == pytest.approx(20.0)
    early = world.instances.reconcile(INSTANCE)  # woken at once (a watch event): not due, nothing sent
    assert world.polls() == 1 and early.requeue_after == pytest.approx(20.0)
    world.tick(19)
    assert world.instances.reconcile(INSTANCE).requeue_after == pytest.approx(1.0) and world.polls() == 1
    world.tick(1)
    assert world.instances.reconcile(INSTANCE).requeue_after == pytest.approx(20.0) and world.polls() == 2


def test_a_provision_the_broker_reports_failed_is_mitigated_and_stays_failed(world: World) -> None:
    world.api.create(INSTANCES, instance_body(fail="no capacity"))
    world.run(INSTANCE, times=2)
    world.run(INSTANCE, times=3)  # polled: in progress, in progress, failed
    status = world.status()
    assert status["orphanMitigationInProgress"] is True and status["observedGeneration"] == 1
    failed = world.condition("Failed")
    assert failed is not None and failed["reason"] == "ProvisionCallFailed" and "no capacity" in failed["message"]
    world.run(INSTANCE, times=4)  # the deprovision (202), polled to succeeded
    assert len(world.broker.calls("DELETE")) == 1
    status = world.status()
    assert status["orphanMitigationInProgress"] is False and status["provisionStatus"] == "NotProvisioned"
    assert world.condition("Failed") == failed  # the verdict outlives the mitigation...
    world.run(INSTANCE, times=3)
    assert len(world.broker.calls("PUT")) == 1  # ...and nothing is retried until the spec changes


def test_the_plans_maximum_polling_duration_times_a_provision_out(world: World) -> None:
    world.api.patch(CLASSES, "", "postgres", {"plans": service_class(maximumPollingDuration=60)["plans"]})
    world.api.create(INSTANCES, instance_body(stall=True))
    world.run(INSTANCE, times=2)  # finalizer, provision accepted
    world.run(INSTANCE, times=5)  # 1 + 2 + 4 + 8 + 16 s: in progress
    assert world.status()["asyncOpInProgress"] is True
    world.tick(60)
    world.run(INSTANCE)  # past the plan's 60 s (shorter than the controller's 3600 s): failed, mitigated
    status = world.status()
    assert status["asyncOpInProgress"] is False and status["orphanMitigationInProgress"] is True
    failed = world.condition("Failed")
    assert failed is not None and failed["reason"] == "AsyncOperationTimedOut"
    assert "within 60s" in failed["message"]


def test_an_asynchronous_bind_is_polled_then_fetched_into_a_secret(world: World) -> None:
    world.api.create(INSTANCES, instance_body(plan="async-bind"))
    world.run(INSTANCE, times=5)
    assert world.status()["provisionStatus"] == "Provisioned"
    world.api.create(
        BINDINGS,
        {
            "apiVersion": API_VERSION,
            "kind": Binding.KIND,
            "metadata": {"name": "creds", "namespace": NAMESPACE},
            "spec": {"instanceRef": {"name": "db"}},
        },
    )
    world.run(BINDING, times=2)  # finalizer, bind accepted
    binding = world.api.get(BINDINGS, NAMESPACE, "creds")
    assert binding is not None and binding["status"]["asyncOpInProgress"] is True
    world.run(BINDING, times=3)  # in progress twice, then succeeded: fetched
    assert len(world.broker.calls("GET", "/service_bindings/" + binding["status"]["externalID"])) == 1
    secret = world.kube.read_secret(NAMESPACE, "creds")
    assert secret is not None and secret["data"]
    ready = world.condition("Ready", "creds", BINDINGS)
    assert ready is not None and ready["status"] == "True" and ready["reason"] == "InjectedBindResult"


def test_a_deletion_deprovisions_and_a_410_on_its_poll_finishes_it(world: World) -> None:
    world.api.create(INSTANCES, instance_body())
    world.run(INSTANCE, times=5)
    instance_id = world.status()["externalID"]
    assert world.kube.delete_custom(instances_kind(), NAMESPACE, "db")
    world.run(INSTANCE)  # the deprovision, accepted
    assert world.status()["currentOperation"] == "Deprovision" and world.status()["asyncOpInProgress"] is True
    world.broker.gone_after_delete = True
    world.broker.instances[instance_id].deleted = True  # the broker finished it: its last_operation answers 410
    world.run(INSTANCE)
    assert world.broker.calls("GET", f"/{instance_id}/last_operation")  # polled, answered 410
    assert world.api.get(INSTANCES, NAMESPACE, "db") is None  # deprovisioned: the finalizer let it go


# -- every Service Catalog kind's act runs through the one executor on the one door ------------------------------


BROKER = Key("scbroker", "", "fake")


def test_a_brokers_relist_writes_its_classes_and_status_through_the_executor(world: World) -> None:
    reconciler = brokers.BrokerReconciler(world.api, clock=world.clock)
    outcome = reconciler.reconcile(BROKER)
    assert outcome.requeue_after == 15 * 60.0  # relistDuration's default
    broker = world.api.get(BROKERS, "", "fake")
    assert broker is not None
    status = broker["status"]
    assert status["lastCatalogRetrievalTime"] == "2026-01-01T00:00:00Z"  # the runtime's clock, not the wall's
    (ready,) = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "True" and ready["reason"] == "FetchedCatalog"
    assert ready["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert status["serviceClassCount"] == 1 and len(world.api.list(CLASSES, label_selector=f"{BROKER_LABEL}=fake")) == 1
    world.tick(60)
    assert reconciler.reconcile(BROKER).requeue_after == pytest.approx(15 * 60.0 - 60)  # not due: nothing written
    assert world.api.get(BROKERS, "", "fake")["metadata"]["resourceVersion"] == broker["metadata"]["resourceVersion"]  # type: ignore[index]


def test_a_brokers_refused_secret_is_said_and_nothing_is_fetched(world: World) -> None:
    world.api.patch(
        BROKERS, "", "fake", {"spec": {"authInfo": {"basic": {"secretRef": {"namespace": "team", "name": "x"}}}}}
    )
    before = len(world.broker.calls("GET"))
    outcome = brokers.BrokerReconciler(world.api, clock=world.clock).reconcile(BROKER)
    retry = DEFAULTS.broker_catalog  # a failed fetch comes back after the table's wait, jittered down at most
    assert outcome.requeue_after is not None and len(world.broker.calls("GET")) == before
    assert (1 - retry.jitter) * retry.base <= outcome.requeue_after <= retry.base
    broker = world.api.get(BROKERS, "", "fake")
    assert broker is not None
    (ready,) = [c for c in broker["status"]["conditions"] if c["type"] == "Ready"]
    assert ready["reason"] == "AuthSecretNotInControlPlane"
    assert any(e["reason"] == "AuthSecretNotInControlPlane" for e in world.kube.events)


def test_a_bindings_deletion_releases_only_its_own_secret_then_its_finalizer(world: World) -> None:
    world.api.create(INSTANCES, instance_body())
    world.run(INSTANCE, times=5)
    world.api.create(
        BINDINGS,
        {
            "apiVersion": API_VERSION,
            "kind": Binding.KIND,
            "metadata": {"name": "creds", "namespace": NAMESPACE},
            "spec": {"instanceRef": {"name": "db"}},
        },
    )
    world.run(BINDING, times=2)  # finalizer, bound at once (a synchronous bind)
    binding = world.api.get(BINDINGS, NAMESPACE, "creds")
    assert binding is not None and FINALIZER in binding["metadata"]["finalizers"]
    assert world.kube.read_secret(NAMESPACE, "creds") is not None
    assert world.kube.delete_custom(KINDS[BINDINGS], NAMESPACE, "creds")
    world.run(BINDING)  # the unbind, then the Secret (stamped with its uid), then the finalizer
    assert world.api.get(BINDINGS, NAMESPACE, "creds") is None
    assert world.kube.read_secret(NAMESPACE, "creds") is None
    assert [r for r in world.broker.requests if r.method == "DELETE" and "/service_bindings/" in r.path]


def test_an_external_id_made_before_the_schema_refused_it_sends_nothing_ever(world: World) -> None:
    """An Instance and a Binding whose ``spec.externalID`` would leave its URL segment (the schema refuses them
    now; these predate it): ``InvalidExternalID`` naming the rule, no request to the broker, not even when deleted
    with a forged status claiming a provision or a bind."""
    world.api.create(INSTANCES, instance_body())
    world.run(INSTANCE, times=5)
    victim = world.status()["externalID"]
    world.broker.requests.clear()
    squat = instance_body("squat")
    squat["spec"]["externalID"] = f"../{victim}/service_bindings/x"
    world.api.create(INSTANCES, squat)
    binding = {
        "apiVersion": API_VERSION,
        "kind": Binding.KIND,
        "metadata": {"name": "creds", "namespace": NAMESPACE},
        "spec": {"instanceRef": {"name": "db"}, "externalID": f"x/../../{victim}"},
    }
    world.api.create(BINDINGS, binding)
    squatter = Key(instances.InstanceReconciler.kind, NAMESPACE, "squat")
    world.run(squatter, times=2)
    world.run(BINDING, times=2)
    for name, plural in (("squat", INSTANCES), ("creds", BINDINGS)):
        ready = world.condition("Ready", name, plural)
        assert ready is not None and ready["status"] == "False" and ready["reason"] == "InvalidExternalID"
        assert osbclient.ID_RULE in ready["message"]
    forged = {"provisionStatus": "Provisioned", "deprovisionStatus": "Required", "externalID": victim}
    world.api.patch_status(INSTANCES, world.instance("squat"), forged, guarded=False)
    bound = world.api.get(BINDINGS, NAMESPACE, "creds")
    assert bound is not None
    world.api.patch_status(BINDINGS, bound, {"unbindStatus": "Required"}, guarded=False)
    assert world.kube.delete_custom(KINDS[BINDINGS], NAMESPACE, "creds")
    assert world.kube.delete_custom(instances_kind(), NAMESPACE, "squat")
    world.run(BINDING)
    world.run(squatter)
    assert world.api.get(BINDINGS, NAMESPACE, "creds") is None and world.api.get(INSTANCES, NAMESPACE, "squat") is None
    assert world.broker.requests == []
    assert world.status()["externalID"] == victim and victim in world.broker.instances


def test_a_conflicting_status_write_is_the_runtimes_conflict(world: World) -> None:
    """The executor guards every status write by the version read: a change meanwhile is a Conflict (re-read)."""
    world.api.create(INSTANCES, instance_body())
    world.run(INSTANCE)  # the finalizer
    facts = world.instances.observe(INSTANCE)
    assert facts is not None
    world.api.patch(INSTANCES, NAMESPACE, "db", {"metadata": {"labels": {"moved": "on"}}})
    with pytest.raises(Conflict):
        world.instances.act(facts, world.instances.plan(facts))
    assert not world.broker.calls("PUT")  # recorded first, so nothing was sent
