"""Each claims kind's act against FakeKube: it only runs the executor, and what the executor writes is right.

ServiceClaim (finalizer, take, binding Secret, status, release on deletion, a lost race), RegisteredService
(status and its Event, the container check's Job), automatic registration (generated objects, the Event on the
binding) and ServiceCatalogs (apply, delete). No API server; the clock is a FakeClock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from opbroker.api.osb import OperationState
from opbroker.api.primaza import RegisteredService, ServiceCatalog, ServiceClaim
from opbroker.controller.catalog.catalog import Catalog
from opbroker.controller.claims import cataloging
from opbroker.controller.claims.claiming import ClaimReconciler
from opbroker.controller.claims.context import Context
from opbroker.controller.claims.core import names
from opbroker.controller.claims.kinds import CATALOGS, CLAIMS, REGISTERED_SERVICES
from opbroker.controller.claims.probes import Prober
from opbroker.controller.claims.registered import RegisteredReconciler
from opbroker.controller.claims.registering import RegistrationReconciler
from opbroker.controller.claims.settings import ClaimsSettings
from opbroker.controller.claims.store import Store
from opbroker.controller.kinds import BINDINGS
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kind
from opbroker.controller.runtime.outcomes import DONE, Conflict
from tests.fake_kube import DEFAULT_KINDS, FakeKube, KindInfo

NS = "team"
OTHERS_FINALIZER = "example.org/keep"


def kind_info(model: Any) -> KindInfo:
    return KindInfo(model.api_version_string(), model.KIND, model.PLURAL)


KINDS = (
    *DEFAULT_KINDS,
    kind_info(RegisteredService),
    kind_info(ServiceClaim),
    kind_info(ServiceCatalog),
    KindInfo("batch/v1", "Job", "jobs"),
    *(KindInfo("apps/v1", k, k.lower() + "s") for k in ("Deployment", "StatefulSet", "DaemonSet")),
)


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube(KINDS)


@pytest.fixture
def ctx(kube: FakeKube) -> Iterator[Context]:
    prober = Prober(lambda key: None, lambda: None, workers=1)  # no loop: nothing probed here
    yield Context(
        kube=kube,  # type: ignore[arg-type]
        store=Store(),
        settings=ClaimsSettings(),
        prober=prober,
        enqueue=lambda key: None,
        osb_catalog=Catalog(),
        clock=FakeClock(),
    )
    prober.shutdown()


def create(kube: FakeKube, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
    made = kube.create_custom(kind, body)
    status = body.get("status")
    if status:
        patched = kube.patch_custom_status(kind, NS, body["metadata"]["name"], status)
        assert patched is not None
        made = patched
    kube.calls.clear()
    return made


def service(name: str = "pg", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": RegisteredService.api_version_string(),
        "kind": RegisteredService.KIND,
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "serviceClassIdentity": [{"name": "type", "value": "postgres"}],
            "serviceEndpointDefinition": [{"name": "host", "value": "db.example"}],
        },
        "status": status,
    }


def claim(finalizers: tuple[str, ...] = (), **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": ServiceClaim.api_version_string(),
        "kind": ServiceClaim.KIND,
        "metadata": {"name": "c1", "namespace": NS, "finalizers": list(finalizers)},
        "spec": {
            "serviceClassIdentity": [{"name": "type", "value": "postgres"}],
            "serviceEndpointDefinitionKeys": ["host"],
            "environmentTag": "dev",
        },
        "status": status,
    }


def reasons(kube: FakeKube) -> list[tuple[str, str]]:
    return [(e["involvedObject"]["kind"], e["reason"]) for e in kube.events]


# -- ServiceClaim ------------------------------------------------------------------------------------------


def test_a_new_claim_takes_the_service_writes_its_stamped_secret_and_says_resolved(
    kube: FakeKube, ctx: Context
) -> None:
    ctx.store.upsert_service(create(kube, REGISTERED_SERVICES, service(state="Available")))
    made = create(kube, CLAIMS, claim(finalizers=(OTHERS_FINALIZER,)))
    assert ClaimReconciler(ctx).reconcile(Key("claim", NS, "c1")) == DONE

    stored = kube.custom_object(CLAIMS, NS, "c1")
    assert stored is not None
    # the claims finalizer was added beside the other controller's, by a guarded write
    assert stored["metadata"]["finalizers"] == [OTHERS_FINALIZER, names.FINALIZER]
    assert stored["status"]["state"] == "Resolved" and stored["status"]["registeredService"] == "pg"
    ready = next(c for c in stored["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Bound")
    taken = kube.custom_object(REGISTERED_SERVICES, NS, "pg")
    assert taken is not None and taken["status"]["claimedBy"] == "c1" and taken["status"]["state"] == "Claimed"
    secret = kube.read_secret(NS, names.binding_secret_name("c1"))
    assert secret is not None
    assert secret["metadata"]["annotations"][ANNOTATION_OWNER_UID] == made["metadata"]["uid"]
    assert reasons(kube) == [("RegisteredService", "Claimed"), ("ServiceClaim", "Bound")]
    verbs = [(c.verb, c.kind) for c in kube.calls if c.verb != "event"]
    assert verbs == [
        ("patch", "ServiceClaim"),
        ("patch_status", "RegisteredService"),
        ("apply_secret", "Secret"),
        ("patch_status", "ServiceClaim"),
    ]


def test_a_deleted_claim_releases_its_service_deletes_its_secret_and_only_its_finalizer(
    kube: FakeKube, ctx: Context
) -> None:
    ctx.store.upsert_service(create(kube, REGISTERED_SERVICES, service(state="Available")))
    create(kube, CLAIMS, claim(finalizers=(OTHERS_FINALIZER,)))
    reconciler = ClaimReconciler(ctx)
    key = Key("claim", NS, "c1")
    reconciler.reconcile(key)
    ctx.store.upsert_service(kube.custom_object(REGISTERED_SERVICES, NS, "pg") or {})
    assert kube.delete_custom(CLAIMS, NS, "c1") is not None  # finalizers hold it: deletionTimestamp set
    kube.events.clear()

    assert reconciler.reconcile(key) == DONE
    stored = kube.custom_object(CLAIMS, NS, "c1")
    assert stored is not None and stored["metadata"]["finalizers"] == [OTHERS_FINALIZER]
    freed = kube.custom_object(REGISTERED_SERVICES, NS, "pg")
    assert freed is not None and freed["status"].get("claimedBy") is None and freed["status"]["state"] == "Available"
    assert kube.read_secret(NS, names.binding_secret_name("c1")) is None
    assert reasons(kube) == [("RegisteredService", "Released")]


def test_a_claim_that_lost_the_race_for_its_service_is_a_conflict(kube: FakeKube, ctx: Context) -> None:
    cached = create(kube, REGISTERED_SERVICES, service(state="Available"))
    ctx.store.upsert_service(cached)
    create(kube, CLAIMS, claim(finalizers=(names.FINALIZER,)))
    # another claim took it since the watch cache saw it: the guarded take fails
    kube.patch_custom_status(REGISTERED_SERVICES, NS, "pg", {"claimedBy": "c2", "state": "Claimed"})
    with pytest.raises(Conflict):
        ClaimReconciler(ctx).reconcile(Key("claim", NS, "c1"))
    taken = kube.custom_object(REGISTERED_SERVICES, NS, "pg")
    assert taken is not None and taken["status"]["claimedBy"] == "c2"
    assert kube.read_secret(NS, names.binding_secret_name("c1")) is None


def test_a_claims_finalizer_write_from_a_stale_read_is_a_conflict_not_a_lost_finalizer(
    kube: FakeKube, ctx: Context
) -> None:
    """The claims finalizer goes through the executor's guarded write: from a stale read (another controller
    added its finalizer meanwhile) the API server's 409 becomes the runtime's Conflict (read again, rate-limited
    backoff), and the other finalizer stays; on a fresh read ours is added beside it."""
    ctx.store.upsert_service(create(kube, REGISTERED_SERVICES, service(state="Available")))
    delivered = create(kube, CLAIMS, claim())
    kube.patch_custom(CLAIMS, NS, "c1", {"metadata": {"finalizers": [OTHERS_FINALIZER]}})
    kube.store.feed(CLAIMS.store_key)
    kube.store.put(CLAIMS.store_key, delivered)
    reconciler = ClaimReconciler(ctx)
    with pytest.raises(Conflict):
        reconciler.reconcile(Key("claim", NS, "c1"))
    stored = kube.custom_object(CLAIMS, NS, "c1")
    assert stored is not None and stored["metadata"]["finalizers"] == [OTHERS_FINALIZER]
    assert kube.read_secret(NS, names.binding_secret_name("c1")) is None  # nothing after the refused write

    kube.store.put(CLAIMS.store_key, stored)
    assert reconciler.reconcile(Key("claim", NS, "c1")) == DONE
    fresh = kube.custom_object(CLAIMS, NS, "c1")
    assert fresh is not None and fresh["metadata"]["finalizers"] == [OTHERS_FINALIZER, names.FINALIZER]


# -- RegisteredService ---------------------------------------------------------------------------------------


def test_a_new_unchecked_service_becomes_available_through_the_executor(kube: FakeKube, ctx: Context) -> None:
    create(kube, REGISTERED_SERVICES, service())
    reconciler = RegisteredReconciler(ctx)
    assert reconciler.reconcile(Key("registered", NS, "pg")) == DONE
    stored = kube.custom_object(REGISTERED_SERVICES, NS, "pg")
    assert stored is not None and stored["status"]["state"] == "Available"
    assert [c.verb for c in kube.calls if c.verb != "event"] == ["patch_status", "patch_status"]
    assert [r for _, r in reasons(kube)] == ["Registered", "Available"]


def test_a_container_check_starts_its_stamped_job_and_comes_back_after_the_period(kube: FakeKube, ctx: Context) -> None:
    body = service(state="Available")
    body["spec"]["healthcheck"] = {"container": {"image": "example/check:1"}, "periodSeconds": 30}
    made = create(kube, REGISTERED_SERVICES, body)
    outcome = RegisteredReconciler(ctx).reconcile(Key("registered", NS, "pg"))
    assert outcome.requeue_after == 30.0
    job = kube.object("batch/v1", "Job", NS, names.healthcheck_name("pg"))
    assert job is not None and job["metadata"]["annotations"][ANNOTATION_OWNER_UID] == made["metadata"]["uid"]
    secret = kube.read_secret(NS, names.healthcheck_name("pg"))
    assert secret is not None and secret["metadata"]["annotations"][ANNOTATION_OWNER_UID] == made["metadata"]["uid"]


# -- automatic registration -----------------------------------------------------------------------------------


def test_an_opted_in_binding_is_registered_and_told_so(kube: FakeKube, ctx: Context) -> None:
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "b1-creds", "namespace": NS},
            "stringData": {"response": '{"credentials": {"host": "db", "port": 5432}}'},
        }
    )
    binding = {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceBinding",
        "metadata": {"name": "b1", "namespace": NS, "annotations": {names.ANNOTATION_REGISTER: "true"}},
        "spec": {"serviceId": "svc", "planId": "plan", "instanceId": "i1", "id": "b1"},
    }
    made = kube.create_custom(BINDINGS, binding)
    kube.patch_custom_status(
        BINDINGS, NS, "b1", {"state": OperationState.SUCCEEDED.value, "response": {"secretRef": "b1-creds"}}
    )
    kube.calls.clear()
    assert RegistrationReconciler(ctx).reconcile(Key("registration", NS, "b1")) == DONE
    generated = kube.custom_object(REGISTERED_SERVICES, NS, "b1")
    assert generated is not None
    assert generated["metadata"]["annotations"][ANNOTATION_OWNER_UID] == made["metadata"]["uid"]
    endpoint = kube.read_secret(NS, names.endpoint_secret_name("b1"))
    assert endpoint is not None
    assert reasons(kube) == [("SFServiceBinding", "ServiceRegistered")]
    assert ctx.store.binding_reading(NS, "b1-creds") == "b1"


# -- ServiceCatalogs --------------------------------------------------------------------------------------------


def test_catalogs_are_applied_and_a_stale_one_deleted(kube: FakeKube, ctx: Context) -> None:
    ctx.store.upsert_service(create(kube, REGISTERED_SERVICES, service(state="Available")))
    stale = {
        "apiVersion": ServiceCatalog.api_version_string(),
        "kind": ServiceCatalog.KIND,
        "metadata": {"name": "old", "namespace": NS, "labels": {names.LABEL_CATALOG: "true"}},
        "spec": {"services": []},
    }
    kube.create_custom(CATALOGS, stale)
    ctx = Context(**{**ctx.__dict__, "settings": ClaimsSettings(environments=("dev",))})
    assert cataloging.CatalogReconciler(ctx).reconcile(Key("catalog", NS, "")) == DONE
    assert kube.custom_object(CATALOGS, NS, "old") is None
    dev = kube.custom_object(CATALOGS, NS, "dev")
    assert dev is not None and [s["name"] for s in dev["spec"]["services"]] == ["pg"]
