"""Catalogs, container health checks as Jobs, automatic registration and settings — without a server.

Aspects: which environments get a catalog and what it lists (Available only; claimed, unreachable,
deleted or excluded services leave it); the period and deadline of container checks, the Job and its
Secret, and what a Job's state means (Complete, Failed, DeadlineExceeded, no verdict by the deadline);
opting a broker binding in, flattening its credentials and the generated RegisteredService for the demo
catalog; settings from the environment and the CLI.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from opbroker.api.primaza import HealthCheck, RegisteredService, ServiceState
from opbroker.controller.claims import healthjobs, servicebinding
from opbroker.controller.claims import settings as claims_settings
from opbroker.controller.claims.core import catalogs, constraints, names, registration
from opbroker.controller.claims.core.matching import Candidate, SlaOrder
from opbroker.controller.claims.core.states import Result
from opbroker.controller.claims.core.views import CatalogEntry, ObjectView, OwnerRef
from opbroker.controller.core.reasons import Reason

REPO = Path(__file__).resolve().parents[2]


def service(name: str, **overrides: Any) -> Candidate:
    fields: dict[str, Any] = {
        "name": name,
        "identity": frozenset({("type", "redis")}),
        "keys": frozenset({"host"}),
        "state": ServiceState.AVAILABLE,
    }
    return Candidate(**{**fields, **overrides})


def test_environments_with_a_catalog() -> None:
    services = [
        service("a", environments=constraints.parse(["dev", "stage"])),
        service("b", environments=constraints.parse(["!prod"])),
        service("c", environments=constraints.parse(["Not_Valid"])),
    ]
    assert catalogs.environments(services, ["qa", "dev"], ["prod"]) == {"dev", "stage", "qa", "prod"}


def test_a_catalog_lists_the_available_services_offered_there() -> None:
    services = [
        service("ok", sla="L1"),
        service("claimed", state=ServiceState.CLAIMED, claimed_by="c"),
        service("down", state=ServiceState.UNREACHABLE),
        service("unknown", state=ServiceState.UNDETERMINED),
        service("new", state=ServiceState.REGISTERED),
        service("going", deleting=True),
        service("excluded", environments=constraints.parse(["!dev"])),
        service("broken", problem="bad"),
        service("also-ok", environments=constraints.parse(["dev"])),
    ]
    manifest = catalogs.manifest("shop", "dev", services)
    assert manifest["metadata"]["name"] == "dev" and manifest["metadata"]["labels"][names.LABEL_CATALOG] == "true"
    assert manifest["spec"]["services"] == [
        {
            "name": "also-ok",
            "serviceClassIdentity": [{"name": "type", "value": "redis"}],
            "serviceEndpointDefinitionKeys": ["host"],
        },
        {
            "name": "ok",
            "serviceClassIdentity": [{"name": "type", "value": "redis"}],
            "serviceEndpointDefinitionKeys": ["host"],
            "sla": "L1",
        },
    ]
    assert [e["name"] for e in catalogs.entries(services, "prod")] == ["excluded", "ok"]


def check(**fields: Any) -> HealthCheck:
    return HealthCheck.model_validate(fields)


@pytest.mark.parametrize(
    ("fields", "period"),
    [
        ({"tcp": {"host": "h", "port": 1}}, 60.0),
        ({"tcp": {"host": "h", "port": 1}, "periodSeconds": 5}, 5.0),
        ({"container": {"image": "i", "minutes": 2}}, 120.0),
        ({"container": {"image": "i", "minutes": 2}, "periodSeconds": 3}, 3.0),
        ({"container": {"image": "i"}, "periodSeconds": 7}, 7.0),
    ],
)
def test_period(fields: dict[str, Any], period: float) -> None:
    assert healthjobs.period_of(check(**fields)) == period


RS = {
    "apiVersion": "primaza.io/v1alpha1",
    "kind": "RegisteredService",
    "metadata": {"name": "orders-db", "namespace": "shop", "uid": "u-9"},
}


def test_the_container_check_job_mounts_the_endpoint_definition() -> None:
    data = {"type": "postgresql", "host": "db", "password": "pw-9f3a"}
    secret, job = healthjobs.manifests(
        OwnerRef.of(RS),
        check(container={"image": "postgres:14", "command": "pg_isready -h $HOST"}, periodSeconds=9),
        data,
        service_type="postgresql",
        fingerprint="f1",
    )
    assert secret["metadata"]["name"] == job["metadata"]["name"] == "orders-db-healthcheck"
    assert secret["type"] == "servicebinding.io/postgresql" and servicebinding.decode(secret) == data
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-9"
    assert job["metadata"]["annotations"][names.ANNOTATION_FINGERPRINT] == "f1"
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (0, 9)
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["volumes"][0]["secret"]["secretName"] == "orders-db-healthcheck"
    (container,) = pod["containers"]
    assert container["image"] == "postgres:14"
    assert container["command"] == ["/bin/sh", "-c", "pg_isready -h $HOST"]
    assert container["volumeMounts"][0]["mountPath"] == "/bindings/orders-db"
    assert {e["name"] for e in container["env"]} == {"SERVICE_BINDING_ROOT", "TYPE", "HOST", "PASSWORD"}
    assert "pw-9f3a" not in json.dumps(job)  # credentials only in the Secret


NOW = datetime.datetime(2030, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


def job(created_seconds_ago: float, *conditions: dict[str, str]) -> dict[str, Any]:
    created = (NOW - datetime.timedelta(seconds=created_seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"creationTimestamp": created}, "status": {"conditions": list(conditions)}}


@pytest.mark.parametrize(
    ("reason", "found", "result"),
    [
        ("still running", job(3), None),
        ("succeeded", job(3, {"type": "Complete", "status": "True"}), Result.PASSED),
        (
            "container failed",
            job(3, {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}),
            Result.FAILED,
        ),
        (
            "killed at the deadline",
            job(3, {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}),
            Result.UNDETERMINED,
        ),
        ("no verdict by the deadline (no kubelet)", job(11), Result.UNDETERMINED),
        ("a false condition means nothing", job(3, {"type": "Complete", "status": "False"}), None),
    ],
)
def test_reading_a_health_check_job(reason: str, found: dict[str, Any], result: Result | None) -> None:
    outcome = healthjobs.read(found, deadline=10, now=NOW)
    assert (outcome.result if outcome else None) == result, reason
    if result == Result.UNDETERMINED:
        assert outcome is not None and outcome.reason == Reason.CHECK_DEADLINE
    assert healthjobs.remaining(job(3), deadline=10, now=NOW) == 7


def demo_catalog() -> tuple[dict[str, Any], dict[str, Any]]:
    service, plan = yaml.safe_load_all((REPO / "examples" / "demo_operator" / "catalog.yaml").read_text())
    return service, plan


def binding(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    service, plan = demo_catalog()
    return {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceBinding",
        "metadata": {"name": "b1", "namespace": "shop", "uid": "u-b1", "annotations": annotations or {}},
        "spec": {"id": "b1", "instanceId": "db1", "serviceId": service["spec"]["id"], "planId": plan["spec"]["id"]},
    }


@pytest.mark.parametrize(
    ("binding_annotation", "plan_label", "expected"),
    [
        (None, None, False),
        ("true", None, True),
        ("True", None, True),
        (None, "true", True),
        ("false", "true", False),
        ("yes", None, False),
    ],
)
def test_opting_in(binding_annotation: str | None, plan_label: str | None, expected: bool) -> None:
    _, plan = demo_catalog()
    if plan_label is not None:
        plan["metadata"]["labels"][names.ANNOTATION_REGISTER] = plan_label
    annotations = {names.ANNOTATION_REGISTER: binding_annotation} if binding_annotation is not None else {}
    assert registration.opted_in(binding(annotations), CatalogEntry.of(plan)) == expected


def test_credentials_are_flattened() -> None:
    response = {"credentials": {"hostname": "db", "port": 5432, "tls": {"on": True}, "bad key": "x", "none": None}}
    credentials = registration.credentials_of({"response": json.dumps(response)})
    assert credentials is not None
    assert registration.flatten(credentials) == {"hostname": "db", "port": "5432", "tls": '{"on": true}'}
    assert registration.credentials_of({"response": "not json"}) is None
    assert registration.credentials_of({"other": "{}"}) is None
    assert registration.credentials_of({"response": '{"credentials": 3}'}) is None


def test_the_generated_registered_service_for_the_demo_catalog() -> None:
    service, plan = demo_catalog()
    annotations = {
        names.ANNOTATION_REGISTER: "true",
        names.ANNOTATION_TYPE: "postgresql",
        names.ANNOTATION_SLA: "L2",
        names.ANNOTATION_ENVIRONMENTS: "dev, !prod",
    }
    source = binding(annotations)
    entries = {"service": CatalogEntry.of(service), "plan": CatalogEntry.of(plan)}
    manifest = registration.registered_service(source, ["hostname", "password"], **entries)
    model = RegisteredService.model_validate(manifest)
    assert [(i.name, i.value) for i in model.spec.service_class_identity] == [
        ("type", "postgresql"),
        ("provider", "opbroker"),
        ("plan", "small"),
    ]
    assert [
        (e.name, e.value_from_secret and e.value_from_secret.name) for e in model.spec.service_endpoint_definition
    ] == [
        ("hostname", "b1-endpoint"),
        ("password", "b1-endpoint"),
    ]
    assert model.spec.sla == "L2"
    assert model.spec.constraints is not None and model.spec.constraints.environments == ["dev", "!prod"]
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "u-b1"
    generated = ObjectView.of(manifest)
    assert registration.generated_by(generated, "b1") and not registration.generated_by(generated, "b2")
    plain = registration.registered_service(binding(), ["uri"], **entries)
    assert plain["spec"]["serviceClassIdentity"][0] == {"name": "type", "value": "demo-db"}
    secret = registration.endpoint_secret(source, {"hostname": "db"})
    assert secret["metadata"]["name"] == "b1-endpoint" and servicebinding.decode(secret) == {"hostname": "db"}


def test_settings_from_the_cli_flags() -> None:
    found = claims_settings.ClaimsSettings.from_flags(
        sla_order="gold, silver,,bronze", environments=["dev", "prod,dev"]
    )
    assert found.sla_order == SlaOrder(("gold", "silver", "bronze"))
    assert found.environments == ("dev", "prod")
    assert claims_settings.ClaimsSettings.from_flags(sla_order=None, environments=None) == (
        claims_settings.ClaimsSettings()
    )


def test_the_cli_flags_reach_the_claims_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from opbroker.cli.main import app
    from opbroker.controller import running

    seen: list[claims_settings.ClaimsSettings] = []
    monkeypatch.setattr(running, "run", lambda settings, **_: seen.append(settings.claims))
    result = CliRunner().invoke(
        app,
        [
            "controller",
            "run",
            "--sla-order",
            "gold,silver",
            "--catalog-environment",
            "dev",
            "--catalog-environment",
            "qa",
        ],
    )
    assert result.exit_code == 0, result.output
    assert seen == [claims_settings.ClaimsSettings(sla_order=SlaOrder(("gold", "silver")), environments=("dev", "qa"))]
