"""The Service Catalog's typed views: built once from a body, they read the fields they name, ignore what else the
server (or a tenant) put there, and read a field of the wrong type as absent instead of failing the reconcile."""

from __future__ import annotations

from typing import Any

import pytest

from opbroker.controller.servicecatalog.core.views import (
    AuthRef,
    BindingSpec,
    BrokerSpec,
    BrokerView,
    CatalogObject,
    InstanceSpec,
    PlanEntry,
    ReviewRequest,
    SecretKeyRef,
    ServiceClassView,
)

BROKER: dict[str, Any] = {
    "apiVersion": "servicecatalog.k8s.io/v1alpha1",
    "kind": "Broker",
    "metadata": {"name": "b", "uid": "u-b", "generation": 3, "managedFields": [{"manager": "kubectl"}]},
    "spec": {
        "url": "https://broker.example",
        "authInfo": {"bearer": {"secretRef": {"name": "token"}}},
        "caBundle": "Q0E=",
        "brokerAPIVersion": "2.16",
        "relistBehavior": "Manual",
        "relistDuration": "1h",
        "relistRequests": 4,
        "futureField": {"x": 1},
    },
    "status": {
        "brokerAPIVersion": "2.15",
        "observedGeneration": 3,
        "reconciledRelistRequests": 4,
        "lastCatalogRetrievalTime": "2026-11-27T05:00:00Z",
        "serviceClassCount": 7,
        "conditions": [{"type": "Ready", "status": "True", "reason": "FetchedCatalog"}],
        "somethingNew": True,
    },
}


def test_a_broker_is_read_with_its_spec_and_status() -> None:
    broker = BrokerView.of(BROKER)
    assert broker.meta.name == "b" and broker.meta.generation == 3
    assert broker.spec == BrokerSpec(
        url="https://broker.example",
        auth=AuthRef("bearer", "default", "token"),  # no namespace: the default one
        ca_bundle="Q0E=",
        insecure_skip_tls_verify=False,
        api_version="2.16",
        relist_behavior="Manual",
        relist_duration="1h",
        relist_requests=4,
    )
    assert (broker.accepted_api_version, broker.observed_generation, broker.reconciled_relist_requests) == (
        "2.15",
        3,
        4,
    )
    assert broker.last_catalog_retrieval == "2026-11-27T05:00:00Z" and broker.service_class_count == 7
    assert broker.ready
    assert broker.owner_reference == {
        "apiVersion": "servicecatalog.k8s.io/v1alpha1",
        "kind": "Broker",
        "name": "b",
        "uid": "u-b",
        "controller": True,
        "blockOwnerDeletion": False,
    }


def test_a_broker_with_fields_of_the_wrong_type_reads_them_as_absent() -> None:
    broker = BrokerView.of(
        {
            "metadata": {"name": "b", "generation": "3"},
            "spec": {
                "url": 7,
                "authInfo": {"basic": {"secretRef": "auth"}, "bearer": ["x"]},
                "insecureSkipTLSVerify": "yes",
                "brokerAPIVersion": 2.16,
                "relistBehavior": None,
                "relistDuration": 15,
                "relistRequests": True,
            },
            "status": {"conditions": "Ready", "serviceClassCount": "7", "reconciledRelistRequests": 1.5},
        }
    )
    assert broker.meta.generation is None
    assert broker.spec == BrokerSpec(
        url="",
        auth=None,
        ca_bundle=None,
        insecure_skip_tls_verify=False,
        api_version=None,
        relist_behavior="Duration",  # the defaults of the CRD
        relist_duration="15m",
        relist_requests=0,
    )
    assert broker.conditions == () and not broker.ready
    assert (broker.service_class_count, broker.reconciled_relist_requests) == (0, 0)
    assert BrokerView.of({"spec": "nonsense", "status": 3}).spec.url == ""


def test_basic_auth_is_found_before_bearer_and_a_ref_without_a_name_is_none() -> None:
    both = {"basic": {"secretRef": {"namespace": "cp", "name": "pw"}}, "bearer": {"secretRef": {"name": "t"}}}
    assert AuthRef.of(both) == ("basic", "cp", "pw")
    assert AuthRef.of({"basic": {"secretRef": {"namespace": "cp"}}, "bearer": {"secretRef": {"name": "t"}}}) == (
        "bearer",
        "default",
        "t",
    )
    assert AuthRef.of({"basic": {"secretRef": {"name": ""}}}) is None
    assert AuthRef.of("basic") is None


CLASS: dict[str, Any] = {
    "apiVersion": "servicecatalog.k8s.io/v1alpha1",
    "kind": "ServiceClass",
    "metadata": {"name": "postgres", "resourceVersion": "9"},
    "brokerName": "b",
    "externalName": "Postgres",
    "externalID": "svc-1",
    "description": "d",
    "plans": [
        {"name": "small", "externalID": "p-1", "maximumPollingDuration": 60, "free": True},
        {"name": "big", "externalID": "p-2", "maximumPollingDuration": "soon"},
        "not a plan",
    ],
    "status": {"removedFromBrokerCatalog": True},
}


def test_a_service_class_is_read_with_its_plans() -> None:
    service_class = ServiceClassView.of(CLASS)
    assert (service_class.meta.name, service_class.broker_name, service_class.external_name) == (
        "postgres",
        "b",
        "Postgres",
    )
    assert service_class.external_id == "svc-1" and service_class.removed
    assert service_class.plans == (PlanEntry("small", "p-1", 60), PlanEntry("big", "p-2", None))  # "soon": no limit
    assert service_class.plan("big") == PlanEntry("big", "p-2", None) and service_class.plan("huge") is None
    # What a relist compares and rewrites: every top-level field but the object's own.
    assert set(service_class.content) == {"brokerName", "externalName", "externalID", "description", "plans"}


def test_a_service_class_with_fields_of_the_wrong_type_reads_them_as_absent() -> None:
    odd = ServiceClassView.of(
        {"metadata": [], "brokerName": 3, "plans": {"name": "p"}, "status": {"removedFromBrokerCatalog": "yes"}}
    )
    assert (odd.meta.name, odd.broker_name, odd.external_id, odd.plans, odd.removed) == ("", "", "", (), False)
    assert PlanEntry.of({"name": 1, "externalID": None, "maximumPollingDuration": True}) == PlanEntry("", "", None)


def test_an_instance_spec_and_its_recorded_plans() -> None:
    body = {
        "metadata": {"name": "db", "namespace": "a", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "serviceClassName": "postgres",
            "planName": "small",
            "updateRequests": 2,
            "shareWith": ["b", 3, "c"],
            "parameters": {"size": 1},
            "parametersFrom": [{"secretKeyRef": {"name": "s", "key": "k"}}, {"secretKeyRef": "s"}, "x"],
            "externalID": "mine",
            "unknown": "ignored",
        },
        "status": {
            "externalProperties": {"planName": "small", "planExternalID": "p-1"},
            "inProgressProperties": {"planName": "big", "planExternalID": 2},
        },
    }
    instance = CatalogObject.of(body)
    assert instance.instance_spec == InstanceSpec(
        class_name="postgres",
        plan_name="small",
        update_requests=2,
        share_with=("b", "c"),
        parameters={"size": 1},
        # An entry without a name or key is kept unnamed: no such Secret is found, which is reported.
        parameters_from=(SecretKeyRef("s", "k"), SecretKeyRef("", ""), SecretKeyRef("", "")),
    )
    assert (instance.chosen_id, instance.created) == ("mine", "2026-01-01T00:00:00Z")
    assert instance.status.held_plan == PlanEntry("small", "p-1", None)
    assert instance.status.asked_plan == PlanEntry("big", "", None)  # an id that is no text is no id


@pytest.mark.parametrize(
    "spec", [{"serviceClassName": 3, "updateRequests": "2", "shareWith": "b", "parameters": [1]}, "spec", None]
)
def test_an_instance_spec_of_the_wrong_types_reads_as_absent(spec: Any) -> None:
    instance = CatalogObject.of({"metadata": {"name": "db"}, "spec": spec})
    assert instance.instance_spec == InstanceSpec("", None, 0, (), {}, ())
    assert instance.chosen_id is None and instance.created == ""


def test_a_binding_spec_names_its_instance_and_secret() -> None:
    body = {
        "apiVersion": "servicecatalog.k8s.io/v1alpha1",
        "kind": "Binding",
        "metadata": {"name": "b1", "namespace": "team", "uid": "u-b1"},
        "spec": {
            "instanceRef": {"name": "db", "namespace": "shared"},
            "secretName": "creds",
            "application": {"name": "web"},
            "futureField": 1,
        },
        "status": {"externalProperties": {"projectionHash": "abc"}},
    }
    binding = CatalogObject.of(body)
    assert binding.instance_ref == ("shared", "db") and binding.secret_name == "creds"
    assert binding.binding_spec.application == {"name": "web"}
    assert binding.status.projection_hash == "abc"
    assert binding.owner_reference["kind"] == "Binding" and binding.owner_reference["blockOwnerDeletion"] is True


def test_a_binding_spec_of_the_wrong_types_falls_back_to_its_own_namespace_and_name() -> None:
    binding = CatalogObject.of(
        {
            "metadata": {"name": "b1", "namespace": "team"},
            "spec": {"instanceRef": {"name": ["db"], "namespace": 5}, "secretName": 3, "application": "web"},
            "status": {"externalProperties": {"projectionHash": 1}},
        }
    )
    assert binding.instance_ref == ("team", "") and binding.secret_name == "b1"
    assert binding.binding_spec == BindingSpec(None, "", None, None, {}, ())
    assert binding.status.projection_hash is None


def test_an_admission_request_names_the_instance_it_is_about() -> None:
    old = {"metadata": {"name": "db", "namespace": "a"}}
    deleting = ReviewRequest.of({"uid": "u1", "operation": "DELETE", "oldObject": old, "extra": 1})
    assert (deleting.uid, deleting.operation, deleting.instance.meta.name) == ("u1", "DELETE", "db")
    named = ReviewRequest.of({"uid": 7, "operation": "UPDATE", "oldObject": "x", "namespace": "a", "name": "db"})
    assert (named.uid, named.instance.meta.namespace, named.instance.meta.name) == ("", "a", "db")
    with pytest.raises(TypeError):
        ReviewRequest.of(["not", "a", "request"])
