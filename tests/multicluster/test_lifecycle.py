"""Multi-cluster replication end to end: master + sister, each a real control plane.

Covers: a full OSB round trip through the master's broker for an instance placed on the sister
(provision → bind → credentials → unbind → deprovision), with everything really happening in the sister
and reported back to the master; the catalog following the master into the sister (create, change,
delete); the SFCluster status; and how long the master → sister → master round trip takes.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from opbroker.api.conventions import CREDENTIALS_KEY, DEFAULT_NAMESPACE
from opbroker.controller.multicluster.reasons import LABEL_REPLICATED
from tests.controller_support import OPBROKER, wait_for
from tests.multicluster_support import (
    CLUSTER_GROUP,
    GROUP,
    PLACED,
    SERVICE_ID,
    VERSION,
    MultiClusterEnv,
    provision,
    wait_state,
)

HEADERS = {"X-Broker-API-Version": "2.17"}


@pytest.fixture(autouse=True)
def label_selector(multicluster: MultiClusterEnv) -> None:
    multicluster.use_scheduler("label-selector")


def poll(http: httpx.Client, path: str, operation: str | None, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = http.get(path, params={"operation": operation} if operation else {})
        if response.status_code == 410:
            return {"state": "gone"}
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if body["state"] in ("succeeded", "failed"):
            return body
        time.sleep(0.2)
    raise AssertionError(f"{path} did not finish within {timeout}s")


def test_osb_round_trip_on_the_sister_through_the_master_broker(
    multicluster: MultiClusterEnv, mc_broker: str, mc_namespace: str
) -> None:
    master, sister = multicluster.master, multicluster.sister
    instance_id, binding_id = f"osb-{uuid.uuid4().hex[:8]}", f"app-{uuid.uuid4().hex[:8]}"
    ids = {"service_id": SERVICE_ID, "plan_id": PLACED}
    with httpx.Client(base_url=mc_broker, auth=multicluster.broker_auth, headers=HEADERS, timeout=30) as http:
        body = {
            **ids,
            "organization_guid": "org",
            "space_guid": "space",
            "context": {"platform": "kubernetes", "namespace": mc_namespace},
            "parameters": {"cluster": "sister", "version": "15"},
        }
        accepted = http.put(f"/v2/service_instances/{instance_id}", params={"accepts_incomplete": "true"}, json=body)
        assert accepted.status_code == 202, accepted.text
        path = f"/v2/service_instances/{instance_id}"
        assert poll(http, f"{path}/last_operation", accepted.json().get("operation"))["state"] == "succeeded"

        on_master = master.get("sfserviceinstances", mc_namespace, instance_id)
        assert on_master is not None and on_master["spec"]["clusterId"] == "sister"
        copy = sister.get("sfserviceinstances", mc_namespace, instance_id)
        assert copy is not None and copy["metadata"]["labels"][LABEL_REPLICATED] == "true"
        assert copy["status"]["state"] == "succeeded"
        database = sister.database(mc_namespace, instance_id)
        assert database is not None and database["spec"]["version"] == "15"
        assert master.database(mc_namespace, instance_id) is None, "nothing is provisioned on the master"
        fetched = http.get(path)
        assert fetched.status_code == 200
        assert fetched.json()["dashboard_url"] == f"https://dashboard.example.com/databases/{instance_id}"

        binding_path = f"{path}/service_bindings/{binding_id}"
        bound = http.put(binding_path, params={"accepts_incomplete": "true"}, json=ids)
        assert bound.status_code == 202, bound.text
        assert poll(http, f"{binding_path}/last_operation", bound.json().get("operation"))["state"] == "succeeded"
        credentials = http.get(binding_path).json()["credentials"]
        user = credentials["username"]
        user_secret = sister.core.read_namespaced_secret(f"{instance_id}-{user}-credentials", mc_namespace)
        assert credentials["password"] == base64.b64decode(user_secret.data["password"]).decode(), (
            "the credentials the master's broker serves are the ones the sister's operator made"
        )
        master_secret = master.core.read_namespaced_secret(f"{binding_id}-credentials", mc_namespace)
        assert json.loads(base64.b64decode(master_secret.data[CREDENTIALS_KEY]))["credentials"] == credentials
        master_binding = master.get("sfservicebindings", mc_namespace, binding_id)
        assert master_binding is not None
        assert master_secret.metadata.owner_references[0].uid == master_binding["metadata"]["uid"]
        assert credentials["password"] not in json.dumps(master_binding), "credentials never enter a status"

        unbound = http.delete(binding_path, params={**ids, "accepts_incomplete": "true"})
        assert unbound.status_code == 202, unbound.text
        assert poll(http, f"{binding_path}/last_operation", unbound.json().get("operation"))["state"] in (
            "succeeded",
            "gone",
        )
        wait_for(lambda: master.get("sfservicebindings", mc_namespace, binding_id) is None, 20, "master binding gone")
        assert sister.get("sfservicebindings", mc_namespace, binding_id) is None, "the sister's copy went first"
        users = (sister.database(mc_namespace, instance_id) or {})["spec"]["users"]
        assert set(users) == {"main"}, "unbind removed the binding's user in the sister"
        wait_for(
            lambda: (
                not master.core.list_namespaced_secret(
                    mc_namespace, field_selector=f"metadata.name={binding_id}-credentials"
                ).items
            ),
            20,
            "the master's credentials Secret to go with its binding",
        )

        removed = http.delete(path, params={**ids, "accepts_incomplete": "true"})
        assert removed.status_code == 202, removed.text
        assert poll(http, f"{path}/last_operation", removed.json().get("operation"))["state"] in ("succeeded", "gone")
        wait_for(lambda: master.get("sfserviceinstances", mc_namespace, instance_id) is None, 20, "master released")
        assert sister.get("sfserviceinstances", mc_namespace, instance_id) is None
        assert sister.database(mc_namespace, instance_id) is None, "the sister tore the Database down"


def test_catalog_follows_the_master_into_the_sister(multicluster: MultiClusterEnv) -> None:
    master, sister = multicluster.master, multicluster.sister
    replicated = sister.get("sfplans", DEFAULT_NAMESPACE, PLACED)
    assert replicated is not None and replicated["metadata"]["labels"][LABEL_REPLICATED] == "true"
    assert replicated["spec"] == (master.get("sfplans", DEFAULT_NAMESPACE, PLACED) or {})["spec"]
    assert sister.get("sfservices", DEFAULT_NAMESPACE, "demo-db") is not None

    name = f"temp-{uuid.uuid4().hex[:6]}"
    plan = yaml.safe_load(
        f"""
        apiVersion: {GROUP}/{VERSION}
        kind: SFPlan
        metadata: {{name: {name}}}
        spec:
          name: {name}
          id: {name}
          serviceId: {SERVICE_ID}
          description: first
          templates: [{{action: provision, type: jinja2, content: "{{}}"}}]
        """
    )
    master.custom.create_namespaced_custom_object(GROUP, VERSION, DEFAULT_NAMESPACE, "sfplans", plan)

    def description() -> str | None:
        found = sister.get("sfplans", DEFAULT_NAMESPACE, name)
        return ((found or {}).get("spec") or {}).get("description")

    wait_for(lambda: description() == "first", 15, "the new plan in the sister")
    master.custom.patch_namespaced_custom_object(
        GROUP, VERSION, DEFAULT_NAMESPACE, "sfplans", name, {"spec": {"description": "second"}}
    )
    wait_for(lambda: description() == "second", 15, "the change in the sister")
    master.custom.delete_namespaced_custom_object(GROUP, VERSION, DEFAULT_NAMESPACE, "sfplans", name)
    wait_for(lambda: sister.get("sfplans", DEFAULT_NAMESPACE, name) is None, 15, "the deletion in the sister")


def test_sfcluster_status_reports_reachability_capacity_and_count(
    multicluster: MultiClusterEnv, mc_namespace: str
) -> None:
    master = multicluster.master
    provision(master, mc_namespace, "counted", plan_id=PLACED, cluster="sister")
    wait_state(master, "sfserviceinstances", mc_namespace, "counted", "succeeded")

    def status(name: str) -> dict[str, Any]:
        found = master.get("sfclusters", DEFAULT_NAMESPACE, name, group=CLUSTER_GROUP) or {}
        result: dict[str, Any] = found.get("status") or {}
        return result

    wait_for(lambda: status("sister").get("serviceInstanceCount") == 1, 15, "the sister's count")
    sister_status = status("sister")
    assert sister_status["reachable"] is True
    assert sister_status["capacity"] == sister_status["allocatable"] == {"cpu": 4}
    assert [(c["status"], c["reason"]) for c in sister_status["conditions"] if c["type"] == "Ready"] == [
        ("True", "Reachable")
    ]
    assert status("1")["reachable"] is True and status("1")["allocatable"] == {"cpu": 1}
    cluster = master.get("sfclusters", DEFAULT_NAMESPACE, "sister", group=CLUSTER_GROUP) or {}
    assert "opbroker.io/cluster-protection" in cluster["metadata"]["finalizers"]


def test_replication_latency_master_to_sister_and_back(multicluster: MultiClusterEnv, mc_namespace: str) -> None:
    master, sister = multicluster.master, multicluster.sister
    seen: dict[str, float] = {}
    started = time.monotonic()
    provision(master, mc_namespace, "timed", plan_id=PLACED, cluster="sister")
    deadline = started + 20
    while "master succeeded" not in seen and time.monotonic() < deadline:  # one loop, 10 ms apart: fair timings
        copy = sister.get("sfserviceinstances", mc_namespace, "timed")
        now = time.monotonic()
        if copy is not None:
            seen.setdefault("copied", now)
            if (copy.get("status") or {}).get("state") == "succeeded":
                seen.setdefault("sister succeeded", now)
        if "sister succeeded" in seen:
            state = ((master.get("sfserviceinstances", mc_namespace, "timed") or {}).get("status") or {}).get("state")
            if state == "succeeded":
                seen["master succeeded"] = time.monotonic()
        time.sleep(0.01)
    assert set(seen) == {"copied", "sister succeeded", "master succeeded"}, seen
    copied, there, back = (seen[k] - started for k in ("copied", "sister succeeded", "master succeeded"))
    print(
        f"\nreplication: master → sister copy {copied:.3f}s (scheduling included); sister succeeded → master "
        f"succeeded {back - there:.3f}s; end to end {back:.3f}s (the demo operator alone takes 1s)"
    )
    assert copied < 5
    assert back - there < 2


def test_plan_diff_previews_instances_placed_on_the_sister(
    multicluster: MultiClusterEnv, mc_namespace: str, tmp_path: Path
) -> None:
    """The preview reads an instance's registry and live sources from the cluster it is placed on."""
    master = multicluster.master
    provision(master, mc_namespace, "previewed", plan_id=PLACED, cluster="sister")
    wait_state(master, "sfserviceinstances", mc_namespace, "previewed", "succeeded")
    plan = master.get("sfplans", DEFAULT_NAMESPACE, PLACED)
    assert plan is not None
    changed = {"apiVersion": plan["apiVersion"], "kind": plan["kind"], "metadata": {"name": PLACED}}
    changed["spec"] = {**plan["spec"], "context": {**plan["spec"]["context"], "storageGB": 2}}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(changed))
    result = subprocess.run(
        [
            str(OPBROKER),
            "plan",
            "diff",
            str(path),
            "--kubeconfig",
            str(master.plane.kubeconfig),
            "--instance-namespace",
            mc_namespace,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"~ {mc_namespace}/previewed\n" in result.stdout
    assert "-  storageGB: 1\n+  storageGB: 2\n" in result.stdout
    assert "1 instance(s): 1 changed, 0 unchanged, 0 failing to render" in result.stdout
