"""The generated CRDs: checked in, in sync with the models, and structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from opbroker.api import RESOURCE_KINDS
from opbroker.api.crd import all_crds, crd_file_name, to_yaml

CRD_DIR = Path(__file__).resolve().parents[2] / "api" / "crds"


def test_checked_in_crds_match_the_models() -> None:
    """Fails when a model changed and ``opbroker crds --write api/crds`` was not run."""
    generated = {crd_file_name(crd): to_yaml([crd]) for crd in all_crds()}
    on_disk = {path.name: path.read_text() for path in CRD_DIR.glob("*.yaml")}
    assert sorted(on_disk) == sorted(generated), "CRD files differ from the models' set of kinds"
    for name, text in generated.items():
        assert on_disk[name] == text, f"{name} drifted from the models: run `opbroker crds --write api/crds`"


def _walk(node: Any, path: str) -> list[str]:
    """Violations of the structural-schema rules the API server enforces, found anywhere in ``node``."""
    problems: list[str] = []
    if not isinstance(node, dict):
        return [f"{path}: not a schema object"]
    for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "$defs", "const", "title"):
        if forbidden in node:
            problems.append(f"{path}: has {forbidden}")
    typed = "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    if not typed:
        problems.append(f"{path}: no type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties together")
    if node.get("additionalProperties") is False:
        problems.append(f"{path}: additionalProperties false")
    for name, child in node.get("properties", {}).items():
        problems += _walk(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _walk(node["additionalProperties"], f"{path}{{}}")
    if "items" in node:
        problems += _walk(node["items"], f"{path}[]")
    return problems


def test_every_schema_is_structural() -> None:
    for crd in all_crds():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert _walk(schema, crd["metadata"]["name"]) == []


def test_crd_facts_come_from_the_models() -> None:
    crds = {crd["spec"]["names"]["kind"]: crd for crd in all_crds()}
    assert set(crds) == {model.KIND for model in RESOURCE_KINDS}
    instance = crds["SFServiceInstance"]
    assert instance["metadata"]["name"] == "sfserviceinstances.osb.servicefabrik.io"
    version = instance["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "State": ".status.state",
        "Cluster": ".spec.clusterId",
        "Plan": ".spec.planId",
        "Age": ".metadata.creationTimestamp",
    }
    assert instance["spec"]["names"]["shortNames"] == ["sfsi"]
    assert crds["SFCluster"]["spec"]["group"] == "resource.servicefabrik.io"
    assert crds["RegisteredService"]["spec"]["group"] == "primaza.io"
    state = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["state"]
    assert state["enum"] == ["in_queue", "update", "delete", "in progress", "succeeded", "failed"]


def test_free_form_fields_keep_unknown_content() -> None:
    plan = next(c for c in all_crds() if c["spec"]["names"]["kind"] == "SFPlan")
    spec = plan["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["context"]["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["metadata"]["x-kubernetes-preserve-unknown-fields"] is True
    cluster = next(c for c in all_crds() if c["spec"]["names"]["kind"] == "SFCluster")
    capacity = cluster["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert capacity["totalCapacity"]["additionalProperties"] == {"x-kubernetes-int-or-string": True}


def test_crd_yaml_is_plain(tmp_path: Path) -> None:
    text = to_yaml(all_crds())
    assert "&id" not in text and "*id" not in text
    assert len(list(yaml.safe_load_all(text))) == len(RESOURCE_KINDS)


def _crd(kind: str) -> dict[str, Any]:
    return next(c for c in all_crds() if c["spec"]["names"]["kind"] == kind)


def test_service_catalog_scopes_names_and_columns() -> None:
    scopes = {kind: _crd(kind)["spec"]["scope"] for kind in ("Broker", "ServiceClass", "Instance", "Binding")}
    assert scopes == {"Broker": "Cluster", "ServiceClass": "Cluster", "Instance": "Namespaced", "Binding": "Namespaced"}
    assert _crd("SFServiceInstance")["spec"]["scope"] == "Namespaced"  # the default
    names = {kind: _crd(kind)["spec"]["names"] for kind in scopes}
    assert {kind: n["shortNames"] for kind, n in names.items()} == {
        "Broker": ["scbroker"],
        "ServiceClass": ["scclass"],
        "Instance": ["scinstance"],
        "Binding": ["scbinding"],
    }
    assert {n["plural"] for n in names.values()} == {"brokers", "serviceclasses", "instances", "bindings"}
    assert all(n["categories"] == ["opbroker", "svcat"] for n in names.values())
    ready = '.status.conditions[?(@.type=="Ready")].reason'
    columns = {
        kind: [(c["name"], c["jsonPath"]) for c in _crd(kind)["spec"]["versions"][0]["additionalPrinterColumns"]]
        for kind in scopes
    }
    age = ("Age", ".metadata.creationTimestamp")
    assert columns == {
        "Broker": [
            ("URL", ".spec.url"),
            ("OSB", ".status.brokerAPIVersion"),
            ("Status", ready),
            ("Classes", ".status.serviceClassCount"),
            ("Catalog-Fetched", ".status.lastCatalogRetrievalTime"),
            age,
        ],
        "ServiceClass": [
            ("Broker", ".brokerName"),
            ("External-Name", ".externalName"),
            ("External-ID", ".externalID"),
            ("Removed", ".status.removedFromBrokerCatalog"),
            age,
        ],
        "Instance": [("Class", ".spec.serviceClassName"), ("Plan", ".spec.planName"), ("Status", ready), age],
        "Binding": [("Instance", ".spec.instanceRef.name"), ("Secret", ".status.secretName"), ("Status", ready), age],
    }


def test_the_protected_group_carries_the_approval_annotation() -> None:
    for kind in ("Broker", "ServiceClass", "Instance", "Binding"):
        annotation = _crd(kind)["metadata"]["annotations"]["api-approved.kubernetes.io"]
        assert annotation.startswith("unapproved, ")
    assert "annotations" not in _crd("SFService")["metadata"]


def test_spec_less_service_class_keeps_its_fields_at_the_top_level() -> None:
    schema = _crd("ServiceClass")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "spec" not in schema["properties"]
    assert schema["required"] == ["brokerName", "externalID", "plans"]
    plans = schema["properties"]["plans"]
    assert plans["x-kubernetes-list-type"] == "map" and plans["x-kubernetes-list-map-keys"] == ["name"]
    assert plans["items"]["properties"]["instanceCreateParameterSchema"]["x-kubernetes-preserve-unknown-fields"]
    assert _crd("ServiceClass")["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert _crd("Broker")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["required"] == ["spec"]


def _undescribed(node: dict[str, Any], path: str) -> list[str]:
    missing = []
    for name, child in node.get("properties", {}).items():
        if "description" not in child:
            missing.append(f"{path}.{name}")
        missing += _undescribed(child, f"{path}.{name}")
    if "items" in node:
        missing += _undescribed(node["items"], f"{path}[]")
    return missing


def test_every_service_catalog_field_is_described_for_kubectl_explain() -> None:
    for kind in ("Broker", "ServiceClass", "Instance", "Binding"):
        schema = _crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        top = {k: v for k, v in schema["properties"].items() if k not in ("apiVersion", "kind", "metadata")}
        assert _undescribed({"properties": top}, kind) == []
    spec = _crd("Instance")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "merged into parameters" in spec["properties"]["parametersFrom"]["description"]


def test_schema_rules_are_cel_where_openapi_cannot_say_them() -> None:
    def rules(node: dict[str, Any]) -> list[str]:
        return [r["message"] for r in node.get("x-kubernetes-validations", [])]

    broker = _crd("Broker")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert rules(broker) == ["caBundle cannot be used when insecureSkipTLSVerify is true"]
    assert rules(broker["properties"]["authInfo"]) == ["exactly one of basic or bearer is required"]
    assert rules(broker["properties"]["relistDuration"]) == ["relistDuration must be greater than zero"]
    assert broker["properties"]["relistDuration"]["pattern"] == r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"
    assert broker["properties"]["url"]["pattern"].startswith("^https?://")
    assert broker["properties"]["caBundle"]["format"] == "byte"
    instance = _crd("Instance")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert rules(instance) == [
        "serviceClassName is immutable",
        "externalID cannot be set, changed or removed after creation",
    ]
    binding = _crd("Binding")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert binding["properties"]["secretName"]["pattern"].startswith("^[a-z0-9]")
    assert "instanceRef is immutable" in rules(binding)
