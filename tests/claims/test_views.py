"""The claims' typed views added for the projection, owners and registrations: they read the fields they name,
ignore what else is there, and read a field of the wrong type as absent."""

from __future__ import annotations

from typing import Any

from opbroker.controller.claims.core.views import (
    CatalogEntry,
    ContainerView,
    JobView,
    ListedCatalog,
    ObjectView,
    OwnerRef,
    WorkloadView,
    credentials_secret_of,
    service_id_of,
)
from opbroker.controller.core.views import BindingView

DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "web",
        "namespace": "shop",
        "labels": {"app": "orders", "bad": 3},
        "managedFields": [{"manager": "kubectl"}, {"manager": "opbroker-claim-c1"}, {"manager": 5}, "x"],
    },
    "spec": {
        "replicas": 2,
        "template": {
            "metadata": {"annotations": {"binding.claims.opbroker.io/c1": "abc", "odd": 1}},
            "spec": {
                "initContainers": [{"name": "migrate", "env": [{"name": "SERVICE_BINDING_ROOT", "value": "/srv"}]}],
                "containers": [
                    {
                        "name": "app",
                        "image": "i",
                        "env": [
                            {"name": "SERVICE_BINDING_ROOT", "valueFrom": {"configMapKeyRef": {"name": "c"}}},
                            {"name": "SERVICE_BINDING_ROOT", "value": "/later"},  # the first one counts
                        ],
                    },
                    {"name": "sidecar"},
                ],
            },
        },
    },
    "status": {"readyReplicas": 2},
}


def test_a_workload_is_read_as_its_projection_needs_it() -> None:
    workload = WorkloadView.of(DEPLOYMENT)
    assert (workload.api_version, workload.kind, workload.meta.name, workload.meta.namespace) == (
        "apps/v1",
        "Deployment",
        "web",
        "shop",
    )
    assert dict(workload.meta.labels) == {"app": "orders"}
    assert workload.template_annotations == {"binding.claims.opbroker.io/c1": "abc"}
    assert workload.init_containers == (ContainerView("migrate", True, "/srv"),)
    assert workload.containers == (ContainerView("app", True, None), ContainerView("sidecar", False, None))
    assert workload.managers == frozenset({"kubectl", "opbroker-claim-c1"})


def test_a_workload_with_fields_of_the_wrong_type_reads_them_as_absent() -> None:
    odd = WorkloadView.of(
        {
            "apiVersion": 1,
            "metadata": {"name": "web", "managedFields": {"manager": "x"}},
            "spec": {"template": {"metadata": "m", "spec": {"containers": {"name": "app"}, "initContainers": ["x"]}}},
        }
    )
    assert (odd.api_version, odd.kind, odd.template_annotations) == ("", "", {})
    assert (odd.containers, odd.init_containers, odd.managers) == ((), (), frozenset())
    assert ContainerView.of({"name": 3, "env": "SERVICE_BINDING_ROOT"}) == ContainerView("", False, None)
    assert WorkloadView.of({"spec": "none"}).containers == ()


def test_owner_refs_and_owners() -> None:
    claim = {"apiVersion": "primaza.io/v1alpha1", "kind": "ServiceClaim", "metadata": {"name": "c", "uid": "u"}}
    assert OwnerRef.of(claim).controlling() == {
        "apiVersion": "primaza.io/v1alpha1",
        "kind": "ServiceClaim",
        "name": "c",
        "uid": "u",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert OwnerRef.of({"apiVersion": 1, "metadata": "m"}) == OwnerRef("", "", "", "", "")
    owned = {
        "metadata": {
            "name": "s",
            "ownerReferences": [{"kind": "SFServiceBinding", "name": "b1", "uid": "u1", "extra": 1}, "x", {"kind": 2}],
        }
    }
    assert ObjectView.of(owned).owners == (("SFServiceBinding", "b1", "u1"), ("", "", ""))
    assert JobView.of(owned).owners == ObjectView.of(owned).owners
    assert ObjectView.of({"metadata": {"ownerReferences": {"kind": "x"}}}).owners == ()


def test_a_catalog_entry_and_a_broker_bindings_registration_fields() -> None:
    plan = CatalogEntry.of({"metadata": {"name": "p", "labels": {"l": "v"}}, "spec": {"name": "small", "id": "p-1"}})
    assert (plan.meta.name, plan.name, dict(plan.meta.labels)) == ("p", "small", {"l": "v"})
    assert CatalogEntry.of({"spec": {"name": ["small"]}}).name is None
    assert CatalogEntry.maybe(None) is None
    binding = BindingView.of(
        {"metadata": {"name": "b"}, "spec": {"serviceId": "svc"}, "status": {"response": {"secretRef": "creds"}}}
    )
    assert (service_id_of(binding), credentials_secret_of(binding)) == ("svc", "creds")
    odd = BindingView.of({"metadata": {"name": "b"}, "spec": {"serviceId": 1}, "status": {"response": "creds"}})
    assert (service_id_of(odd), credentials_secret_of(odd)) == ("", None)


def test_a_listed_catalog_is_its_name_and_services() -> None:
    listed = {"metadata": {"name": "dev"}, "spec": {"services": [{"name": "db"}], "other": 1}, "status": {}}
    assert (ListedCatalog.of(listed).meta.name, ListedCatalog.of(listed).services) == ("dev", [{"name": "db"}])
    assert ListedCatalog.of({"metadata": {"name": "dev"}, "spec": {"services": "db"}}).services == []
    assert ListedCatalog.of({"spec": None}).services == []
