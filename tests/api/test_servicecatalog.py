"""The Service Catalog model (servicecatalog.k8s.io/v1alpha1): the design's four manifests, the validation the
schema carries (pydantic and the CRD's OpenAPI/CEL rules, each with bad input), and a real API server serving
the CRDs, applying the manifests and explaining the fields."""

from __future__ import annotations

import copy
import json
import subprocess
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker import osbclient
from opbroker.api import Binding, Broker, Instance, RelistBehavior, ServiceClass, service_class_name
from opbroker.api.crd import crd_for
from opbroker.api.manifests import check_file, check_text
from opbroker.api.osb import OSB_ID_RULE
from opbroker.api.servicecatalog import SERVICE_CATALOG_GROUP, parse_go_duration
from opbroker.devcluster import ControlPlane, find_binaries
from opbroker.osbclient import paths
from tests.waiting import wait_for

SEED = Path(__file__).resolve().parents[1] / "data" / "servicecatalog"
SEED_FILES = ("broker.yaml", "serviceclass.yaml", "instance.yaml", "binding.yaml")
VERSION = "v1alpha1"


def seed(name: str) -> dict[str, Any]:
    document = yaml.safe_load((SEED / name).read_text())
    assert isinstance(document, dict)
    return document


def kubernetes_names(document: dict[str, Any]) -> dict[str, Any]:
    """The design's manifest with its camelCase object names lowercased, the only change Kubernetes forces:
    metadata.name and the names referring to objects (brokerName, secretName, instanceRef.name)."""
    doc = copy.deepcopy(document)
    doc["metadata"]["name"] = service_class_name(doc["metadata"]["name"])
    if "brokerName" in doc:
        doc["brokerName"] = service_class_name(doc["brokerName"])
    spec = doc.get("spec", {})
    if "secretName" in spec:
        spec["secretName"] = service_class_name(spec["secretName"])
    if "instanceRef" in spec:
        spec["instanceRef"]["name"] = service_class_name(spec["instanceRef"]["name"])
    return doc


# --- the design's manifests ------------------------------------------------------------------------------------


def test_the_designs_camel_case_names_are_refused_with_the_name_to_use() -> None:
    problems = {name: check_file(SEED / name)[0].problems for name in SEED_FILES}
    rule = "(DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' and '.', starting and ending with a"
    assert problems["broker.yaml"] == (
        f"metadata: name 'BestDataBase' is not a valid Kubernetes name {rule} letter or digit); try 'bestdatabase'",
    )
    assert problems["instance.yaml"] == (
        f"metadata: name 'johnsDB' is not a valid Kubernetes name {rule} letter or digit); try 'johnsdb'",
    )
    assert [p.split(":")[0] for p in problems["serviceclass.yaml"]] == ["metadata", "brokerName"]
    assert [p.split(":")[0] for p in problems["binding.yaml"]] == [
        "metadata",
        "spec.instanceRef.name",
        "spec.secretName",
    ]
    assert problems["binding.yaml"][2].endswith("try 'johnsecret'")


def test_the_designs_manifests_load_once_their_names_are_lowercase() -> None:
    loaded = {name: check_text(yaml.safe_dump(kubernetes_names(seed(name))))[0] for name in SEED_FILES}
    for name, checked in loaded.items():
        assert checked.ok, (name, checked.problems)
        assert checked.resource is not None
        assert type(checked.resource).model_validate(checked.resource.to_manifest()) == checked.resource

    broker = loaded["broker.yaml"].resource
    assert isinstance(broker, Broker)
    assert broker.metadata.name == "bestdatabase" and broker.spec.url == "http://bestdatabase.com"
    assert broker.spec.relist_behavior is RelistBehavior.DURATION
    assert broker.spec.relist_interval == timedelta(minutes=15)
    assert broker.spec.auth_info is None and broker.spec.relist_requests == 0

    service_class = loaded["serviceclass.yaml"].resource
    assert isinstance(service_class, ServiceClass)
    assert service_class.broker_name == "bestdatabase" and service_class.external_name == "smallDB"
    assert service_class.plan("default") is not None and service_class.status is None
    assert set(service_class.to_manifest()) >= {"brokerName", "externalID", "plans"}
    assert "spec" not in service_class.to_manifest()

    instance = loaded["instance.yaml"].resource
    assert isinstance(instance, Instance)
    # The class is named by the broker's name for it, unchanged: the class's externalName.
    assert instance.spec.service_class_name == "smallDB" and instance.spec.plan_name is None

    binding = loaded["binding.yaml"].resource
    assert isinstance(binding, Binding)
    assert binding.spec.effective_secret_name("johnsbinding") == "johnsecret"
    assert binding.spec.instance_ref.namespace is None
    assert binding.spec.application is not None and binding.spec.application.kind == "Deployment"
    assert binding.spec.application.selector is not None
    assert binding.spec.application.selector.match_labels == {"role": "frontend"}


def test_a_binding_without_secret_name_uses_its_own_name() -> None:
    binding = Binding.model_validate({"metadata": {"name": "b1"}, "spec": {"instanceRef": {"name": "db"}}})
    assert binding.spec.effective_secret_name("b1") == "b1"


# --- validation ------------------------------------------------------------------------------------------------


def problems(document: dict[str, Any]) -> tuple[str, ...]:
    (checked,) = check_text(yaml.safe_dump(document))
    assert not checked.ok, "expected a refusal"
    return checked.problems


def broker(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "servicecatalog.k8s.io/v1alpha1",
        "kind": "Broker",
        "metadata": {"name": "b"},
        "spec": {"url": "https://broker.example", **spec},
    }


SECRET = {"namespace": "brokers", "name": "broker-auth"}
PEM = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"url": "ftp://broker.example"},
            "spec.url: 'ftp://broker.example' is not an http:// or https:// URL with a host",
        ),
        ({"url": "https://"}, "spec.url: 'https://' is not an http:// or https:// URL with a host"),
        ({"authInfo": {}}, "spec.authInfo: exactly one of basic or bearer is required"),
        (
            {"authInfo": {"basic": {"secretRef": SECRET}, "bearer": {"secretRef": SECRET}}},
            "spec.authInfo: exactly one of basic or bearer is required",
        ),
        (
            {"authInfo": {"basic": {"secretRef": {"name": "broker-auth"}}}},
            "spec.authInfo.basic.secretRef.namespace: Field required",
        ),
        (
            {"authInfo": {"bearer": {"secretRef": {"namespace": "Brokers", "name": "t"}}}},
            "spec.authInfo.bearer.secretRef.namespace: 'Brokers' is not a valid namespace name (DNS-1123 label: at "
            "most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)",
        ),
        (
            {"relistDuration": "15 minutes"},
            "spec.relistDuration: '15 minutes' is not a duration such as '15m', '1h30m' or '90s' (units: h, m, s, ms, "
            "us, ns)",
        ),
        ({"relistDuration": "0s"}, "spec.relistDuration: relistDuration must be greater than zero"),
        ({"relistBehavior": "Sometimes"}, "spec.relistBehavior: Input should be 'Duration' or 'Manual'"),
        ({"relistRequests": -1}, "spec.relistRequests: Input should be greater than or equal to 0"),
        ({"caBundle": "not base64!"}, "spec.caBundle: caBundle must be base64 (of a PEM bundle of CA certificates)"),
        (
            {"caBundle": "aGVsbG8="},
            "spec.caBundle: caBundle must be base64 of a PEM bundle with at least one CERTIFICATE block",
        ),
        (
            {"caBundle": PEM, "insecureSkipTLSVerify": True},
            "spec: caBundle cannot be used when insecureSkipTLSVerify is true",
        ),
    ],
)
def test_bad_broker_specs_are_refused_naming_the_field(spec: dict[str, Any], expected: str) -> None:
    assert problems(broker(**spec)) == (expected,)


def test_a_good_broker_spec_with_auth_and_ca_loads() -> None:
    loaded = Broker.model_validate(
        broker(authInfo={"bearer": {"secretRef": SECRET}}, caBundle=PEM, relistBehavior="Manual", relistDuration="1h")
    )
    assert loaded.spec.auth_info is not None and loaded.spec.auth_info.bearer is not None
    assert loaded.spec.relist_interval is None  # Manual: no periodic relist


def test_a_cluster_scoped_kind_refuses_a_namespace() -> None:
    document = broker()
    document["metadata"]["namespace"] = "default"
    assert problems(document) == (
        "(document): metadata.namespace: Broker is cluster-scoped; remove namespace 'default'",
    )


def test_service_class_plans_are_required_and_unique() -> None:
    document = kubernetes_names(seed("serviceclass.yaml"))
    assert problems({**document, "plans": []}) == ("plans: List should have at least 1 item after validation, not 0",)
    plan = document["plans"][0]
    twice = {**document, "plans": [plan, {**plan, "externalID": "other"}]}
    assert problems(twice) == ("(document): plans: name 'default' appears more than once",)
    assert problems({**document, "spec": {}}) == ("spec: Extra inputs are not permitted",)


def instance(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "servicecatalog.k8s.io/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "i"},
        "spec": {"serviceClassName": "smalldb", **spec},
    }


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"serviceClassName": ""}, "spec.serviceClassName: String should have at least 1 character"),
        (
            {"parametersFrom": [{"secretKeyRef": {"name": "db-params"}}]},
            "spec.parametersFrom[0].secretKeyRef.key: Field required",
        ),
        (
            {"parametersFrom": [{"secretKeyRef": {"name": "db_params", "key": "p"}}]},
            "spec.parametersFrom[0].secretKeyRef.name: 'db_params' is not a valid Kubernetes name (DNS-1123 "
            "subdomain: at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or "
            "digit); try 'db-params'",
        ),
        (
            {"parametersFrom": [{"secretKeyRef": {"name": "p", "key": "a/b"}}]},
            "spec.parametersFrom[0].secretKeyRef.key: 'a/b' is not a valid Secret key (letters, digits, '-', '_' "
            "and '.')",
        ),
        ({"parametersFrom": [{"configMapKeyRef": {}}]}, "spec.parametersFrom[0].secretKeyRef: Field required"),
        ({"updateRequests": -1}, "spec.updateRequests: Input should be greater than or equal to 0"),
        (
            {"shareWith": ["Team_B"]},
            "spec.shareWith[0]: 'Team_B' is not a valid namespace name (DNS-1123 label: at most 63 lowercase "
            "letters, digits and '-', starting and ending with a letter or digit)",
        ),
    ],
)
def test_bad_instance_specs_are_refused_naming_the_field(spec: dict[str, Any], expected: str) -> None:
    assert problems(instance(**spec))[0] == expected


def test_an_instance_shares_itself_with_named_namespaces_or_all() -> None:
    for share_with in (["team-b", "team-c"], ["*"], []):
        (checked,) = check_text(yaml.safe_dump(instance(shareWith=share_with)))
        assert checked.ok, checked.problems
    assert Instance.model_validate(instance(shareWith=["team-b"])).spec.share_with == ["team-b"]


def test_instance_status_holds_checksums_not_parameters() -> None:
    document = instance()
    document["status"] = {"externalProperties": {"planName": "default", "parametersChecksum": "abc"}}
    assert problems(document) == (
        "status.externalProperties.parametersChecksum: String should match pattern '^[0-9a-f]{64}$'",
    )
    document["status"] = {"externalProperties": {"parameters": {"password": "x"}}}
    assert problems(document) == ("status.externalProperties.parameters: Extra inputs are not permitted",)
    document["status"] = {"currentOperation": "Bind"}
    assert problems(document) == ("status.currentOperation: Input should be 'Provision', 'Update' or 'Deprovision'",)


def test_binding_names_and_application_are_checked() -> None:
    base = kubernetes_names(seed("binding.yaml"))
    other = copy.deepcopy(base)
    other["spec"]["instanceRef"]["namespace"] = "Team_A"
    assert problems(other)[0].startswith("spec.instanceRef.namespace: 'Team_A' is not a valid namespace name")
    both = copy.deepcopy(base)
    both["spec"]["application"]["name"] = "web"
    assert problems(both) == ("spec.application: application: exactly one of name or selector is required",)
    credentials = copy.deepcopy(base)
    credentials["status"] = {"credentials": {"password": "x"}}
    assert problems(credentials) == ("status.credentials: Extra inputs are not permitted",)


#: Ids that would take an OSB URL out of its segment (issue 42), and ids the rule lets through (percent-encoded).
ESCAPING_IDS = ("../victim/service_bindings/x", "x/../victim", "a/b", "a?b", "a#b", "%2e%2e", ".", "..", "a\nb")
PLAIN_IDS = ("5b1c8a7e-4a0f-4c1e-9d3a-0e2f6b7c8d9a", "...", "a b", "ünïcödé", "x" * osbclient.MAX_ID_BYTES)
TOO_LONG_IDS = ("x" * (osbclient.MAX_ID_BYTES + 1), "é" * 128)  # 256 characters; 256 bytes in 128 characters


def test_an_external_id_follows_the_osb_clients_id_rule() -> None:
    """Instance and Binding ``spec.externalID`` are checked with the client's own check, naming the rule."""
    binding = kubernetes_names(seed("binding.yaml"))
    for bad in (*ESCAPING_IDS, *TOO_LONG_IDS):
        for document in (instance(externalID=bad), {**binding, "spec": {**binding["spec"], "externalID": bad}}):
            (problem,) = problems(document)
            assert problem.startswith("spec.externalID: externalID: ") and problem.endswith(osbclient.ID_RULE)
    for good in PLAIN_IDS:
        assert Instance.model_validate(instance(externalID=good)).spec.external_id == good
        spec = {**binding["spec"], "externalID": good}
        assert Binding.model_validate({**binding, "spec": spec}).spec.external_id == good


def test_the_crds_carry_the_osb_clients_id_rule() -> None:
    """The API server checks the same pattern and byte bound as the client (one definition: ``osbclient.paths``)."""
    for model in (Instance, Binding):
        (crd_version,) = crd_for(model)["spec"]["versions"]
        field = crd_version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["externalID"]
        assert field["maxLength"] == osbclient.MAX_ID_BYTES and field["minLength"] == 1
        (validation,) = field["x-kubernetes-validations"]
        assert validation == {"rule": OSB_ID_RULE, "message": f"externalID: {osbclient.ID_RULE}"}
        assert f"r'{paths.ID_PATTERN}'" in validation["rule"] and f"<= {osbclient.MAX_ID_BYTES}" in validation["rule"]


def test_names_and_durations_helpers() -> None:
    assert service_class_name("smallDB") == "smalldb"
    assert service_class_name("Best_Data Base") == "best-data-base"
    assert service_class_name("-a..b-.c-") == "a.b.c"
    assert service_class_name("***").startswith("class-")
    assert parse_go_duration("1h30m") == timedelta(minutes=90)
    assert parse_go_duration("1.5h") == timedelta(minutes=90)
    assert parse_go_duration("250ms") == timedelta(milliseconds=250)


# --- a real API server -----------------------------------------------------------------------------------------


@pytest.fixture
def custom(api_client: client.ApiClient) -> Iterator[client.CustomObjectsApi]:
    """Custom-objects API; cluster-scoped objects this test made are deleted afterwards (no namespace does it)."""
    api = client.CustomObjectsApi(api_client)
    yield api
    for plural in ("serviceclasses", "brokers"):
        for item in api.list_cluster_custom_object(SERVICE_CATALOG_GROUP, VERSION, plural)["items"]:
            api.delete_cluster_custom_object(SERVICE_CATALOG_GROUP, VERSION, plural, item["metadata"]["name"])


def refusal(call: Any, *args: Any) -> str:
    with pytest.raises(ApiException) as refused:
        call(*args)
    assert refused.value.status == 422, refused.value.body
    return str(json.loads(refused.value.body)["message"])


def without_server_fields(document: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k != "metadata"} | {"metadata": {"name": document["metadata"]["name"]}}


def test_the_designs_manifests_apply_to_a_real_api_server(custom: client.CustomObjectsApi, namespace: str) -> None:
    group = SERVICE_CATALOG_GROUP
    # As the design writes them: the API server itself refuses the camelCase name (any CRD would be refused).
    message = refusal(custom.create_cluster_custom_object, group, VERSION, "brokers", seed("broker.yaml"))
    assert 'metadata.name: Invalid value: "BestDataBase": a lowercase RFC 1123 subdomain' in message

    documents = {name: kubernetes_names(seed(name)) for name in SEED_FILES}
    created = {
        "broker.yaml": custom.create_cluster_custom_object(group, VERSION, "brokers", documents["broker.yaml"]),
        "serviceclass.yaml": custom.create_cluster_custom_object(
            group, VERSION, "serviceclasses", documents["serviceclass.yaml"]
        ),
        "instance.yaml": custom.create_namespaced_custom_object(
            group, VERSION, namespace, "instances", documents["instance.yaml"]
        ),
        "binding.yaml": custom.create_namespaced_custom_object(
            group, VERSION, namespace, "bindings", documents["binding.yaml"]
        ),
    }
    for name, stored in created.items():
        # Nothing pruned: every field the manifest set is stored as sent.
        assert without_server_fields(stored) == without_server_fields(documents[name]), name
        # And what the server returns loads into the model.
        assert check_text(yaml.safe_dump(stored))[0].ok, name
    assert "namespace" not in created["broker.yaml"]["metadata"]  # cluster-scoped
    assert created["instance.yaml"]["metadata"]["namespace"] == namespace

    # The controller's writes: the status subresource of the spec-less ServiceClass.
    status = {"status": {"removedFromBrokerCatalog": True}}
    patched = custom.patch_cluster_custom_object_status(group, VERSION, "serviceclasses", "smalldb", status)
    assert patched["status"] == {"removedFromBrokerCatalog": True}


def test_the_schema_rules_hold_on_a_real_api_server(custom: client.CustomObjectsApi, namespace: str) -> None:
    group, name = SERVICE_CATALOG_GROUP, f"b-{uuid.uuid4().hex[:8]}"
    create = custom.create_cluster_custom_object

    def bad_broker(**spec: Any) -> str:
        return refusal(create, group, VERSION, "brokers", {**broker(**spec), "metadata": {"name": name}})

    both = {"basic": {"secretRef": SECRET}, "bearer": {"secretRef": SECRET}}
    assert "exactly one of basic or bearer is required" in bad_broker(authInfo=both)
    assert "relistDuration must be greater than zero" in bad_broker(relistDuration="0s")
    assert "spec.relistDuration: Invalid value" in bad_broker(relistDuration="15 minutes")
    assert "spec.url: Invalid value" in bad_broker(url="ftp://x")
    assert "caBundle cannot be used when insecureSkipTLSVerify is true" in bad_broker(
        caBundle=PEM, insecureSkipTLSVerify=True
    )

    create(group, VERSION, "brokers", {**broker(relistRequests=2), "metadata": {"name": name}})
    lower = {"spec": {"relistRequests": 1}}
    message = refusal(custom.patch_cluster_custom_object, group, VERSION, "brokers", name, lower)
    assert "relistRequests may only be increased" in message

    custom.create_namespaced_custom_object(group, VERSION, namespace, "instances", instance(externalID="osb-1"))
    for change, expected in (
        ({"serviceClassName": "other"}, "serviceClassName is immutable"),
        ({"externalID": "osb-2"}, "externalID cannot be set, changed or removed after creation"),
    ):
        message = refusal(
            custom.patch_namespaced_custom_object, group, VERSION, namespace, "instances", "i", {"spec": change}
        )
        assert expected in message
    # The plan may change (an OSB update), and so may whom the instance is shared with.
    custom.patch_namespaced_custom_object(group, VERSION, namespace, "instances", "i", {"spec": {"planName": "big"}})
    custom.patch_namespaced_custom_object(group, VERSION, namespace, "instances", "i", {"spec": {"shareWith": ["*"]}})
    message = refusal(
        custom.patch_namespaced_custom_object,
        group,
        VERSION,
        namespace,
        "instances",
        "i",
        {"spec": {"shareWith": ["Team_B"]}},
    )
    assert "spec.shareWith[0]: Invalid value" in message

    binding = kubernetes_names(seed("binding.yaml"))
    custom.create_namespaced_custom_object(group, VERSION, namespace, "bindings", binding)
    message = refusal(
        custom.patch_namespaced_custom_object,
        group,
        VERSION,
        namespace,
        "bindings",
        "johnsbinding",
        {"spec": {"instanceRef": {"name": "other"}}},
    )
    assert "instanceRef is immutable" in message


def test_the_api_server_refuses_an_external_id_that_would_leave_its_url_segment(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    """The CEL rule, evaluated by the API server (RE2, bytes): every escaping id is refused on create naming the
    rule, every too long one by the schema's byte bound (checked before the rule, which the API server then skips);
    every id the client would send as one segment is accepted."""
    group = SERVICE_CATALOG_GROUP
    too_long = "Too long: may not be more than 255 bytes"  # the schema's bound, in characters: checked first

    def named(message: str, bad: str) -> bool:
        return osbclient.ID_RULE in message or (bad in TOO_LONG_IDS and too_long in message)

    for n, bad in enumerate((*ESCAPING_IDS, *TOO_LONG_IDS)):
        document = {**instance(externalID=bad), "metadata": {"name": f"bad-{n}"}}
        message = refusal(custom.create_namespaced_custom_object, group, VERSION, namespace, "instances", document)
        assert named(message, bad), (bad, message)
        binding = {**kubernetes_names(seed("binding.yaml")), "metadata": {"name": f"bad-{n}"}}
        binding["spec"] = {**binding["spec"], "externalID": bad}
        message = refusal(custom.create_namespaced_custom_object, group, VERSION, namespace, "bindings", binding)
        assert named(message, bad), (bad, message)
    for n, good in enumerate((*PLAIN_IDS, "é" * 127)):
        document = {**instance(externalID=good), "metadata": {"name": f"good-{n}"}}
        created = custom.create_namespaced_custom_object(group, VERSION, namespace, "instances", document)
        assert created["spec"]["externalID"] == good


def openapi_schemas(api_client: client.ApiClient) -> dict[str, Any]:
    """The group's OpenAPI v3 document as the API server publishes it (what ``kubectl explain`` reads)."""
    method, url, headers, body, _ = api_client.param_serialize(
        "GET", f"/openapi/v3/apis/{SERVICE_CATALOG_GROUP}/{VERSION}", auth_settings=["BearerToken"]
    )
    response = api_client.call_api(method, url, header_params=headers, body=body)
    response.read()
    assert response.status == 200, response.data
    document = json.loads(response.data)
    by_kind = {}
    for schema in document["components"]["schemas"].values():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            if gvk["group"] == SERVICE_CATALOG_GROUP:
                by_kind[gvk["kind"]] = schema
    return by_kind


def test_the_api_server_explains_every_field(api_client: client.ApiClient, control_plane: ControlPlane) -> None:
    def described() -> dict[str, Any] | None:
        found = openapi_schemas(api_client)
        return found if {"Broker", "ServiceClass", "Instance", "Binding"} <= set(found) else None

    # The OpenAPI document follows the CRDs asynchronously.
    schemas = wait_for(described, 60, "the OpenAPI document to describe the Service Catalog kinds", interval=0.3)
    instance_spec = schemas["Instance"]["properties"]["spec"]
    parameters_from = instance_spec["properties"]["parametersFrom"]
    assert "merged into parameters" in parameters_from["description"]
    assert "derives a UUID from the Instance's uid" in instance_spec["properties"]["externalID"]["description"]
    assert "ReferenceGrant" in instance_spec["properties"]["shareWith"]["description"]
    assert "externalName" in schemas["ServiceClass"]["properties"]
    assert schemas["Binding"]["properties"]["spec"]["properties"]["secretName"]["description"].startswith(
        "The Secret, in the Binding's namespace"
    )

    binaries = find_binaries()
    assert binaries is not None

    def kubectl(*args: str) -> str:
        result = subprocess.run(
            [str(binaries.kubectl), "--kubeconfig", str(control_plane.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    explained = kubectl("explain", "instance.spec.parametersFrom")
    assert "servicecatalog.k8s.io" in explained and "merged into parameters" in " ".join(explained.split())
    # "binding" alone is core/v1 Binding (pod scheduling); the short name reaches this one.
    explained = kubectl("explain", "scbinding.spec.application")
    assert "servicebinding.io" in " ".join(explained.split())
    # The category and the short names resolve (the listings may be empty by now).
    kubectl("get", "svcat", "-A")
    kubectl("get", "scbroker,scclass,scinstance,scbinding", "-A")
