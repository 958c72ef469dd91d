"""The master installs, upgrades and removes opbroker's controller in a sister cluster (issue 29), from the same
definitions the ControlPlane component uses. Two real kube-apiservers: the session's (the master) and one started
here (the sister, without opbroker's CRDs: the installation brings them). The SFCluster reconciler runs in-process
against both; no pod needs to run (the sister has no node)."""

from __future__ import annotations

import base64
import json
import os
import types
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config, dynamic
from kubernetes.client.exceptions import ApiException

from opbroker.controller.core.reasons import Reason
from opbroker.controller.multicluster.clusters import CLUSTERS, CatalogReplicator, ClusterReconciler, ClusterRegistry
from opbroker.controller.multicluster.core.ledger import Ledger
from opbroker.controller.multicluster.installer import MANAGED_BY
from opbroker.controller.runtime.clock import SYSTEM
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.runner import Runtime
from opbroker.controller.settings import ControllerSettings
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.incluster import control_plane_manifests

OPERATOR_RULE = {"apiGroups": ["demo.opbroker.io"], "resources": ["databases"], "verbs": ["get", "list", "watch"]}
SNAKE_RULE = {"api_groups": ["demo.opbroker.io"], "resources": ["databases"], "verbs": ["get", "list", "watch"]}


@pytest.fixture(scope="module")
def sister() -> Iterator[ControlPlane]:
    plane = ControlPlane(f"pytest-sister-{os.getpid()}")
    plane.up(progress=lambda message: print(f"[sister] {message}"))
    try:
        yield plane
    finally:
        plane.down(progress=lambda _message: None)


@pytest.fixture(scope="module")
def sister_api(sister: ControlPlane) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(sister.kubeconfig))
    yield api
    api.close()


class Master:
    """The master's side: a control-plane namespace, SFClusters in it, the reconciler run on demand."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api)
        deps = types.SimpleNamespace(
            kube=Kube(api), settings=ControllerSettings(multicluster=True, namespace=namespace), clock=SYSTEM
        )
        self.registry = ClusterRegistry()
        reconciler = ClusterReconciler(
            deps,  # type: ignore[arg-type]
            self.registry,
            Ledger(),
            CatalogReplicator(namespace),
            lambda _plan: {},
            lambda _key: None,
            lambda *_: None,
        )
        self.runtime = Runtime(workers=1)
        self.runtime.register(reconciler)

    def register(self, name: str, kubeconfig: str, controller: dict[str, Any] | None) -> None:
        client.CoreV1Api(self.api).create_namespaced_secret(
            self.namespace, {"metadata": {"name": f"{name}-kubeconfig"}, "stringData": {"kubeconfig": kubeconfig}}
        )
        spec: dict[str, Any] = {"secretRef": f"{name}-kubeconfig"}
        if controller is not None:
            spec["controller"] = controller
        self.custom.create_namespaced_custom_object(
            CLUSTERS.group,
            CLUSTERS.version,
            self.namespace,
            CLUSTERS.plural,
            {"apiVersion": CLUSTERS.api_version, "kind": "SFCluster", "metadata": {"name": name}, "spec": spec},
        )

    def reconcile(self, name: str) -> None:
        self.runtime.reconcile_now(Key("cluster", self.namespace, name))

    def cluster(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(
                CLUSTERS.group, CLUSTERS.version, self.namespace, CLUSTERS.plural, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def condition(self, name: str, kind: str) -> dict[str, Any] | None:
        body = self.cluster(name) or {}
        return next((c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)

    def patch_controller(self, name: str, controller: dict[str, Any] | None) -> None:
        self.custom.patch_namespaced_custom_object(
            CLUSTERS.group,
            CLUSTERS.version,
            self.namespace,
            CLUSTERS.plural,
            name,
            {"spec": {"controller": controller}},
        )


@pytest.fixture
def master(api_client: client.ApiClient) -> Iterator[Master]:
    namespace = f"mi-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": namespace}})
    yield Master(api_client, namespace)
    client.CoreV1Api(api_client).delete_namespace(namespace)


def component_objects(namespace: str, image: str) -> list[dict[str, Any]]:
    """The controller's objects as the ControlPlane component creates them (rendered under Pulumi's mocks)."""
    args = {"image": image, "namespace": namespace, "controller": {"replicas": 1, "operator_rules": [SNAKE_RULE]}}
    return [
        m
        for m in control_plane_manifests(args)
        if (m["metadata"].get("labels") or {}).get("app.kubernetes.io/component") in ("controller", "plans")
    ]


def read(api: client.ApiClient, manifest: dict[str, Any]) -> dict[str, Any] | None:
    resource = dynamic.DynamicClient(api).resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
    meta = manifest["metadata"]
    try:
        found: dict[str, Any] = resource.get(name=meta["name"], namespace=meta.get("namespace")).to_dict()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def contains(actual: Any, expected: Any, path: str = "") -> list[str]:
    """Where ``actual`` differs from ``expected`` (every field of ``expected`` present and equal; the API server's
    defaults beside them are fine)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [path]
        return [p for k, v in expected.items() for p in contains(actual.get(k), v, f"{path}.{k}")]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [path]
        return [
            p for i, (a, e) in enumerate(zip(actual, expected, strict=True)) for p in contains(a, e, f"{path}[{i}]")
        ]
    return [] if actual == expected or (expected == "" and actual is None) else [path]


def managed_by_master(value: Any) -> Any:
    """``value`` with the one label that differs: ``managed-by`` says who applied it (Pulumi, or the master)."""
    if isinstance(value, dict):
        return {
            k: MANAGED_BY if k == "app.kubernetes.io/managed-by" else managed_by_master(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [managed_by_master(v) for v in value]
    return value


def installed(api: client.ApiClient, objects: list[dict[str, Any]]) -> list[str]:
    """``kind/name`` of each of ``objects`` present in the cluster."""
    return [f"{m['kind']}/{m['metadata']['name']}" for m in objects if read(api, m) is not None]


def table_row(master: Master, name: str) -> dict[str, str]:
    """The SFCluster's row as ``kubectl get`` prints it (the server's Table: the CRD's printer columns)."""
    path = f"/apis/{CLUSTERS.group}/{CLUSTERS.version}/namespaces/{master.namespace}/{CLUSTERS.plural}/{name}"
    method, url, headers, body, _ = master.api.param_serialize(
        "GET",
        path,
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    answer = master.api.call_api(method, url, header_params=headers, body=body)
    answer.read()
    response = json.loads(answer.data)
    names = [column["name"] for column in response["columnDefinitions"]]
    (row,) = response["rows"]
    return {column: str(cell) for column, cell in zip(names, row["cells"], strict=True)}


def test_install_creates_exactly_the_components_objects_and_an_image_change_upgrades(
    master: Master, sister: ControlPlane, sister_api: client.ApiClient
) -> None:
    ns = master.namespace
    master.register(
        "sis", sister.kubeconfig.read_text(), {"image": "opbroker:one", "replicas": 1, "operatorRules": [OPERATOR_RULE]}
    )
    master.reconcile("sis")

    expected = component_objects(ns, "opbroker:one")
    assert {m["kind"] for m in expected} >= {"ServiceAccount", "ClusterRole", "Role", "Deployment"}
    for manifest in expected:
        found = read(sister_api, manifest)
        assert found is not None, f"{manifest['kind']} {manifest['metadata']['name']} is missing in the sister"
        assert contains(found, managed_by_master(manifest)) == [], manifest["kind"]
    # Nothing else: every object the master labelled as its own is one of the component's (or the namespace).
    mine = set()
    for kind in ("ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "PodDisruptionBudget"):
        version = {"Deployment": "apps/v1", "PodDisruptionBudget": "policy/v1", "ServiceAccount": "v1", "Service": "v1"}
        api_version = version.get(kind, "rbac.authorization.k8s.io/v1")
        resource = dynamic.DynamicClient(sister_api).resources.get(api_version=api_version, kind=kind)
        listed = resource.get(label_selector=f"app.kubernetes.io/managed-by={MANAGED_BY}").to_dict()["items"]
        mine |= {(kind, item["metadata"]["name"]) for item in listed}
    assert mine == {(m["kind"], m["metadata"]["name"]) for m in expected if m["metadata"].get("namespace")}
    # Applied, but the sister has no node: its Deployment is 0/1, so the controller is not installed yet (issue
    # 47: this said True) and the cluster is not Ready, with the counts.
    done = master.condition("sis", "ControllerInstalled")
    assert done is not None and (done["status"], done["reason"]) == ("False", Reason.CONTROLLER_UNAVAILABLE.value)
    assert "opbroker:one" in done["message"] and "0 of 1 replica(s) available" in done["message"]
    ready = master.condition("sis", "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", Reason.CONTROLLER_UNAVAILABLE.value)
    # `kubectl get sfclusters` shows it: the READY and REASON columns.
    columns = table_row(master, "sis")
    assert (columns["Ready"], columns["Reason"]) == ("False", Reason.CONTROLLER_UNAVAILABLE.value)

    # Upgrade: a new image in spec.controller is applied to the Deployment.
    master.patch_controller("sis", {"image": "opbroker:two", "replicas": 1, "operatorRules": [OPERATOR_RULE]})
    master.reconcile("sis")
    deployment = next(m for m in expected if m["kind"] == "Deployment")
    found = read(sister_api, deployment)
    assert found is not None
    (container,) = found["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "opbroker:two"
    done = master.condition("sis", "ControllerInstalled")
    assert done is not None and "opbroker:two" in done["message"]

    # Withdrawn: the objects go, and the condition with them.
    master.patch_controller("sis", None)
    master.reconcile("sis")
    assert installed(sister_api, expected) == []
    master.reconcile("sis")
    assert master.condition("sis", "ControllerInstalled") is None


def test_deleting_the_sfcluster_removes_the_controller_first(
    master: Master, sister: ControlPlane, sister_api: client.ApiClient
) -> None:
    ns = master.namespace
    master.register("gone", sister.kubeconfig.read_text(), {"image": "opbroker:one", "replicas": 1})
    master.reconcile("gone")
    expected = component_objects(ns, "opbroker:one")
    assert installed(sister_api, [m for m in expected if m["kind"] == "Deployment"]) == [
        "Deployment/opbroker-controller"
    ]
    body = master.cluster("gone")
    assert body is not None and body["metadata"].get("finalizers")

    master.custom.delete_namespaced_custom_object(CLUSTERS.group, CLUSTERS.version, ns, CLUSTERS.plural, "gone")
    master.reconcile("gone")
    assert installed(sister_api, expected) == []
    assert master.cluster("gone") is None  # the finalizer went once the controller was removed


def sister_kubeconfig_without_rights(sister: ControlPlane, sister_api: client.ApiClient) -> tuple[str, str]:
    """A kubeconfig for a ServiceAccount of the sister with no rights at all, and its token."""
    core = client.CoreV1Api(sister_api)
    core.create_namespaced_service_account("default", {"metadata": {"name": "powerless"}})
    token = core.create_namespaced_service_account_token(
        "powerless", "default", {"spec": {"expirationSeconds": 3600}}
    ).status.token
    full = yaml.safe_load(sister.kubeconfig.read_text())
    cluster = full["clusters"][0]
    return (
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "powerless", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": cluster["name"], "user": "powerless"}}],
                "current-context": "c",
            }
        ),
        token,
    )


def test_a_kubeconfig_without_rights_makes_the_sfcluster_not_ready_with_the_reason(
    master: Master, sister: ControlPlane, sister_api: client.ApiClient
) -> None:
    kubeconfig, token = sister_kubeconfig_without_rights(sister, sister_api)
    master.register("weak", kubeconfig, {"image": "opbroker:one"})
    master.reconcile("weak")
    ready = master.condition("weak", "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", Reason.CONTROLLER_INSTALL_FAILED.value)
    assert "may not apply" in ready["message"] and "HTTP 403" in ready["message"]
    done = master.condition("weak", "ControllerInstalled")
    assert done is not None and done["status"] == "False"
    body = master.cluster("weak")
    assert token not in str(body)
    assert base64.b64encode(token.encode()).decode() not in str(body)
