"""The generated CRDs: checked in, in sync with the models, and structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from opbroker.api import RESOURCE_KINDS
from opbroker.api.crd import all_crds, crd_file_name, to_yaml

CRD_DIR = Path(__file__).resolve().parent.parent / "api" / "crds"


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
