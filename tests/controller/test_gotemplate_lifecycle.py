"""Service Fabrik's Zalando plan, unchanged (gotemplate), through the real controller on the real control plane.

A stand-in ``postgresql`` CRD (acid.zalan.do/v1) and a stand-in Zalando operator (``tests/zalando_standin.py``)
play the operator's part; the seed's SFService and SFPlan are applied as they are (both session fixtures of
``tests/controller_support.py``: the template types' end-to-end test runs the same plan through the broker).
Covered: provision (the cluster rendered by Go's text/template, status read through the status template), bind (the
bind template edits the live cluster's users, the credentials come from the operator's Secret through the status
template and land in the binding's Secret only), unbind (the user goes) and deprovision (the cluster goes, the
status template sees it gone); a plan whose gotemplate does not parse fails its instance with plan, action and line
and applies nothing.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
import yaml
from kubernetes import client

from opbroker.api.conventions import CREDENTIALS_KEY
from tests.controller.test_lifecycle import GROUP, VERSION, bind, custom, get, gone, provision, wait_state
from tests.controller_support import SEEDS, apply_yaml, wait_for

PG = ("acid.zalan.do", "v1", "postgresqls")
SERVICE_ID = "24731fb8-7b84-5f57-914f-c3d55d793dd4"
PLAN_ID = "39d7d4c8-6fe2-4c2a-a5ca-b826937d5a88"
#: What the seed's plan is provisioned with in these tests.
PARAMETERS = {"foo": "bar"}
BROKEN_PLAN_ID = "6b0e35a8-0a4e-4d0c-9f3e-8f1d2b9c7a55"


@pytest.fixture(scope="session")
def broken_zalando_plan(api_client: client.ApiClient, catalog_namespace: str, tmp_path_factory: Any) -> None:
    """A copy of the seed's plan whose provision template does not parse."""
    broken = yaml.safe_load((SEEDS / "sfplan-postgresql-zalando.yaml").read_text())
    broken["metadata"] = {"name": BROKEN_PLAN_ID, "labels": {"serviceId": SERVICE_ID}}
    broken["spec"].update(id=BROKEN_PLAN_ID, name="broken")
    provision = next(t for t in broken["spec"]["templates"] if t["action"] == "provision")
    provision["content"] = provision["content"].replace("{{- $users :=", "{{- $users := nosuchfunction }}\n{{- $x :=")
    path = tmp_path_factory.mktemp("zalando") / "broken-plan.yaml"
    path.write_text(yaml.safe_dump(broken))
    apply_yaml(api_client, path, catalog_namespace)


pytestmark = pytest.mark.usefixtures("zalando_operator", "broken_zalando_plan", "controller")


def cluster(api: client.ApiClient, namespace: str, instance: str) -> dict[str, Any] | None:
    return get(api, namespace, PG[2], f"sapcp-{instance}", *PG[:2])


def test_the_seed_plan_provisions_binds_unbinds_and_deprovisions(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    provision(api_client, namespace, "pg1", service_id=SERVICE_ID, plan_id=PLAN_ID, parameters=PARAMETERS)
    instance = wait_state(api_client, namespace, "sfserviceinstances", "pg1", "succeeded", timeout=60)
    assert instance["status"]["resources"] == [
        {"apiVersion": "acid.zalan.do/v1", "kind": "postgresql", "name": "sapcp-pg1", "namespace": namespace}
    ]
    pg = cluster(api_client, namespace, "pg1")
    assert pg is not None and pg["status"]["PostgresClusterStatus"] == "Running"
    assert pg["spec"]["users"] == {"main": ["superuser", "createdb"]}
    assert pg["spec"]["volume"] == {"size": "20Gi"}
    assert pg["spec"]["postgresql"] == {"version": "9.6", "parameters": {"max_connections": "100"}}
    assert pg["metadata"]["annotations"]["operator-broker/plan-id"] == PLAN_ID

    bind(api_client, namespace, "bd1", "pg1", service_id=SERVICE_ID, plan_id=PLAN_ID)
    binding = wait_state(api_client, namespace, "sfservicebindings", "bd1", "succeeded", timeout=60)
    users = cluster(api_client, namespace, "pg1")["spec"]["users"]  # type: ignore[index]
    assert users == {"main": ["superuser", "createdb"], "bd1": ["superuser"]}
    secret_name = binding["status"]["response"]["secretRef"]
    stored = core.read_namespaced_secret(secret_name, namespace).data[CREDENTIALS_KEY]
    credentials = json.loads(base64.b64decode(stored))["credentials"]
    operator_secret = core.read_namespaced_secret("bd1.sapcp-pg1.credentials.postgresql.acid.zalan.do", namespace)
    password = base64.b64decode(operator_secret.data["password"]).decode()
    service_ip = core.read_namespaced_service("sapcp-pg1", namespace).spec.cluster_ip
    assert credentials == {
        "dbname": "main",
        "hostname": service_ip,
        "port": "5432",
        "username": "bd1",
        "password": password,
        "uri": f"postgres://bd1:{password}@{service_ip}:5432/main?sslmode=require",
    }
    assert password not in json.dumps(binding), "credentials belong in the Secret, not the binding's status"
    events = core.list_namespaced_event(namespace).items
    assert all(password not in (e.message or "") for e in events)

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfservicebindings", "bd1")
    wait_for(lambda: gone(api_client, namespace, "sfservicebindings", "bd1"), 60, "the binding to be released")
    users = cluster(api_client, namespace, "pg1")["spec"]["users"]  # type: ignore[index]
    assert users == {"main": ["superuser", "createdb"]}, "unbind must remove exactly the binding's user"

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", "pg1")
    wait_for(lambda: gone(api_client, namespace, "sfserviceinstances", "pg1"), 60, "the instance to be released")
    assert cluster(api_client, namespace, "pg1") is None


def test_a_gotemplate_that_does_not_parse_fails_the_instance_and_applies_nothing(
    api_client: client.ApiClient, namespace: str
) -> None:
    provision(api_client, namespace, "pg2", service_id=SERVICE_ID, plan_id=BROKEN_PLAN_ID, parameters=PARAMETERS)
    instance = wait_state(api_client, namespace, "sfserviceinstances", "pg2", "failed", timeout=60)
    error = copy.deepcopy(instance["status"]).get("error") or ""
    assert 'function "nosuchfunction" not defined' in error, error
    assert "action 'provision', template provision line 19: syntax error" in error, error
    assert custom(api_client).list_namespaced_custom_object(*PG[:2], namespace, PG[2])["items"] == []
