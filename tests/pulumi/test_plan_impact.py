"""`pulumi preview` of an SFPlan change under the real engine (an inline Automation API program) shows, under the
SFPlan, what the change does to each running instance, read from a local control plane: the counts, then each
changed instance's diff (a Secret's values redacted), its live source read as the plan's ServiceAccount; nothing is
applied (every object's resourceVersion unchanged). In one more preview: a user who may not impersonate the plan's
account, a plan the cluster does not have yet and a cluster that does not answer each get one line, and the preview
goes on.

The catalog and the instances are created directly, as a `pulumi up` and the broker would have (no controller:
the preview reads instances, not their operator's objects).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from pulumi import automation as auto

from opbroker import stacks
from opbroker.api.crd import all_crds
from opbroker.components import SFPlan, SFService
from opbroker.devcluster.pulumi_engine import Engine
from tests.tenancy_support import ensure_service_account

pytestmark = pytest.mark.apiserver  # its own fixtures start a local control plane (tests/conftest.py)

pytest_plugins = ["tests.pulumi_engine_support"]

GROUP, VERSION = "osb.servicefabrik.io", "v1alpha1"
CATALOG = "opbroker"
TEAM = "team"
SERVICE_ID, PLAN_ID = "svc-impact", "plan-impact"
ACCOUNT = f"system:serviceaccount:{CATALOG}:opbroker-plans"
OWNER = "platform-team-owner-value"
SOURCES = """
settings: {apiVersion: v1, kind: ConfigMap, name: shared-settings, namespace: "{{ instance.metadata.namespace }}"}
"""
PROVISION = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ instance.metadata.name }}-settings
data:
  size: "SIZE"
  colour: "{{ settings.data.colour if settings is defined and settings else 'unread' }}"
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ instance.metadata.name }}-admin
stringData:
  password: "{{ generatePassword('admin', 20) }}"
  owner: "OWNER"
"""
V1 = {"SIZE": "{{ parameter('/size', 1) }}", "OWNER": "ops"}
# Ten times the size, and the owner from the instance's parameters (a value no template holds).
V2 = {"SIZE": "{{ parameter('/size', 1) | int * 10 }}", "OWNER": "{{ parameter('/owner', 'ops') }}"}


def templates(fields: dict[str, str]) -> list[dict[str, Any]]:
    provision = PROVISION
    for key, value in fields.items():
        provision = provision.replace(key, value)
    return [
        {"action": "sources", "type": "jinja2", "content": SOURCES},
        {"action": "provision", "type": "jinja2", "content": provision},
        {"action": "status", "type": "jinja2", "content": "provision: {state: succeeded}"},
    ]


def service_args() -> dict[str, Any]:
    return {"id": SERVICE_ID, "name": "impact", "description": "impact preview", "bindable": False}


def plan_args(fields: dict[str, str], **more: Any) -> dict[str, Any]:
    return {
        "id": PLAN_ID,
        "name": "impact",
        "description": "a plan whose change is previewed",
        "service_id": SERVICE_ID,
        "templates": templates(fields),
        **more,
    }


@pytest.fixture(scope="module")
def api(engine: Engine) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(engine.kubeconfig))


def install_crds(api: client.ApiClient) -> None:
    extensions = client.ApiextensionsV1Api(api)
    names = []
    for crd in all_crds():
        names.append(crd["metadata"]["name"])
        extensions.create_custom_resource_definition(crd)
    deadline = time.monotonic() + 60
    while True:
        conditions = [extensions.read_custom_resource_definition(n).status.conditions or [] for n in names]
        if all(any(c.type == "Established" and c.status == "True" for c in cs) for cs in conditions):
            return
        assert time.monotonic() < deadline, f"the CRDs are not Established: {conditions}"
        time.sleep(0.5)


def custom_object(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def cluster(api: client.ApiClient) -> Iterator[None]:
    """Three instances of the plan and one of another (as the broker creates them), the source they read, and the
    plan's account allowed to read it; the catalog itself comes from the stack's `up`."""
    install_crds(api)
    core, custom, rbac = client.CoreV1Api(api), client.CustomObjectsApi(api), client.RbacAuthorizationV1Api(api)
    for namespace in (CATALOG, TEAM):
        core.create_namespace({"metadata": {"name": namespace}})
    for name, plan_id, size in (("a", PLAN_ID, 1), ("b", PLAN_ID, 2), ("c", PLAN_ID, 0), ("other", "plan-other", 1)):
        parameters = {"size": size, **({"owner": OWNER} if size else {})}
        spec = {"instanceId": name, "serviceId": SERVICE_ID, "planId": plan_id, "parameters": parameters}
        body = custom_object("SFServiceInstance", name, spec)
        custom.create_namespaced_custom_object(GROUP, VERSION, TEAM, "sfserviceinstances", body)
    core.create_namespaced_config_map(TEAM, {"metadata": {"name": "shared-settings"}, "data": {"colour": "teal"}})
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    rbac.create_namespaced_role(TEAM, {"metadata": {"name": "plans-read-settings"}, "rules": [rule]})
    rbac.create_namespaced_role_binding(
        TEAM,
        {
            "metadata": {"name": "plans-read-settings"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "plans-read-settings"},
            "subjects": [{"kind": "ServiceAccount", "name": "opbroker-plans", "namespace": CATALOG}],
        },
    )
    yield


def versions(api: client.ApiClient) -> dict[tuple[str, str, str], str]:
    """(kind, namespace, name) → resourceVersion of everything the preview could have touched."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    found: dict[tuple[str, str, str], str] = {}
    for namespace in (CATALOG, TEAM):
        for plural in ("sfplans", "sfservices", "sfserviceinstances"):
            for item in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]:
                found[(plural, namespace, item["metadata"]["name"])] = item["metadata"]["resourceVersion"]
        for cm in core.list_namespaced_config_map(namespace).items:
            found[("configmaps", namespace, cm.metadata.name)] = cm.metadata.resource_version
        for secret in core.list_namespaced_secret(namespace).items:
            found[("secrets", namespace, secret.metadata.name)] = secret.metadata.resource_version
    return found


def select(engine: Engine, folder: Path, program: Callable[[], None]) -> auto.Stack:
    return stacks.select_stack(
        "impact", "test", program, engine.settings(folder), config={"kubernetes:kubeconfig": str(engine.kubeconfig)}
    )


def preview(
    stack: auto.Stack, program: Callable[[], None]
) -> tuple[stacks.Preview, dict[str, list[tuple[str, str]]], float]:
    """The program's preview (``--diff``), what was logged under each SFPlan (by name: severity, message), seconds."""
    logged: dict[str, list[tuple[str, str]]] = {}

    def collect(event: auto.EngineEvent) -> None:
        diagnostic = event.diagnostic_event
        if diagnostic is not None and diagnostic.urn:
            kind, _, name = diagnostic.urn.rpartition("::")
            if not kind.endswith("opbroker:index:SFPlan"):
                return  # the plan's custom resource child has the same name
            logged.setdefault(name, []).append((str(diagnostic.severity), diagnostic.message.rstrip("\n")))

    start = time.monotonic()
    result = stacks.preview(stack, events=collect, deadline=240, program=program)
    return result, logged, time.monotonic() - start


@pytest.fixture(scope="module")
def stack(engine: Engine, cluster: None, tmp_path_factory: pytest.TempPathFactory) -> auto.Stack:
    """The stack with the catalog's first version up (SFService and SFPlan V1 in the cluster)."""

    def program() -> None:
        SFService("impact-service", service_args())  # type: ignore[arg-type]
        SFPlan("impact", plan_args(V1))  # type: ignore[arg-type]

    stack = select(engine, tmp_path_factory.mktemp("impact"), program)
    start = time.monotonic()
    stacks.up(stack, deadline=240)
    print(f"[impact] up of the catalog's first version: {time.monotonic() - start:.1f} s")
    return stack


def token_kubeconfig(api: client.ApiClient, admin_kubeconfig: Path, namespace: str, account: str) -> str:
    """A kubeconfig's text logged in as ServiceAccount ``namespace/account`` (a TokenRequest token)."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    token = client.CoreV1Api(api).create_namespaced_service_account_token(account, namespace, request).status.token
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]
    user = {"name": account, "user": {"token": token}}
    context = {"name": account, "context": {"cluster": cluster["name"], "user": account}}
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [user],
            "contexts": [context],
            "current-context": account,
        }
    )


def test_a_plan_change_previews_its_impact_on_each_instance_and_applies_nothing(
    stack: auto.Stack, api: client.ApiClient
) -> None:
    before = versions(api)

    def program() -> None:
        SFService("impact-service", service_args())  # type: ignore[arg-type]
        SFPlan("impact", plan_args(V2))  # type: ignore[arg-type]

    result, logged, seconds = preview(stack, program)
    print(f"[impact] preview with the impact of 3 instances: {seconds:.1f} s")
    start = time.monotonic()
    plain = stack.preview(color="never", program=program).stdout  # what `pulumi preview` prints
    print(f"[impact] the same as a plain `pulumi preview`: {time.monotonic() - start:.1f} s")

    shown = logged["impact"]
    messages = [message for _, message in shown]
    text = "\n".join(messages)
    assert messages[0].startswith(
        f"impact on running instances (read as {ACCOUNT}): 3 instance(s): 2 changed, 1 unchanged, 0 failing to render"
    ), text
    for name, size in (("a", 1), ("b", 2)):
        diff = next(m for m in messages if m.startswith(f"~ {TEAM}/{name}\n"))
        assert f"--- {TEAM}/{name} (current plan)\n+++ {TEAM}/{name} (new plan)" in diff
        assert f"-  size: '{size}'\n+  size: '{size * 10}'" in diff, diff
        assert "\n-  owner: (redacted, sha256 " in diff and "\n+  owner: (redacted, sha256 " in diff, "a digest"
        assert "colour: teal" in diff, "the live source was read (as the plan's account, granted to read it)"
    assert f"{TEAM}/c" not in text and f"{TEAM}/other" not in text, "unchanged or another plan's: only counted"
    assert OWNER not in text and OWNER not in result.text, "a Secret's value never shows"
    assert "~ team/a" in plain, "the engine's own output shows it under the plan"
    assert versions(api) == before, "a preview applies nothing"
    with pytest.raises(ApiException) as gone:
        client.CoreV1Api(api).read_namespaced_config_map("a-settings", TEAM)
    assert gone.value.status == 404


def test_who_may_not_impersonate_a_new_plan_and_a_silent_cluster_are_one_line_each(
    engine: Engine, stack: auto.Stack, api: client.ApiClient
) -> None:
    # A user who may read the catalog but not impersonate the plan's account.
    ensure_service_account(api, TEAM, "viewer")
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role(
        {
            "metadata": {"name": "impact-viewer"},
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": ["sfplans", "sfservices", "sfserviceinstances"],
                    "verbs": ["get", "list"],
                }
            ],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "impact-viewer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "impact-viewer"},
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": TEAM}],
        }
    )
    viewer = token_kubeconfig(api, engine.kubeconfig, TEAM, "viewer")
    silent = yaml.safe_load(viewer)
    silent["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"  # nothing listens there
    before = versions(api)

    def program() -> None:
        SFPlan("impact", plan_args(V2, preview_kubeconfig=viewer))  # type: ignore[arg-type]
        SFPlan("fresh", plan_args(V2, id="plan-fresh", name="fresh"))  # type: ignore[arg-type]
        SFPlan("far", plan_args(V2, id="plan-far", name="far", preview_kubeconfig=yaml.safe_dump(silent)))  # type: ignore[arg-type]

    result, logged, seconds = preview(stack, program)
    print(f"[impact] preview of three plans, each one line: {seconds:.1f} s")

    assert logged["impact"] == [
        (
            "warning",
            f"impact on running instances not shown: your user may not impersonate {ACCOUNT}: the preview reads as "
            "the plan's account (grant 'impersonate' on that ServiceAccount, or preview without --as-plan-account)",
        )
    ]
    assert logged["fresh"] == [
        (
            "info",
            "impact on running instances: plan 'plan-fresh' is not in namespace 'opbroker' yet: no instance to change",
        )
    ]
    [(severity, message)] = logged["far"]
    assert severity == "warning" and message.startswith("impact on running instances not shown: "), message
    assert set(result.summary) >= {"create"}, "the preview itself went on"
    assert versions(api) == before
