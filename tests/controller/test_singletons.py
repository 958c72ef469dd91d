"""Shared singletons that owner references cannot hold (issue 29): a cluster-scoped one, and one in another
namespace, live until the last instance using them is deprovisioned — on the real control plane."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.devcluster.grants import grant_plan_account, onboard_namespace
from tests.controller.test_lifecycle import GROUP, VERSION, custom, gone, provision, wait_state
from tests.controller_support import OWNER_VERBS, apply_yaml, wait_for

pytestmark = pytest.mark.usefixtures("controller")

ACCOUNT = "singleton-plans"
#: Where opbroker tracks the instances using a singleton that owner references cannot hold.
USERS = "opbroker.io/singleton-users"

PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata:
  name: {name}
spec:
  name: {name}
  id: {name}
  serviceId: 6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11
  description: a plan sharing one object among its instances
  serviceAccountName: {account}
  namespaces: {namespaces}
  templates:
  - action: provision
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: "{{{{ instance.metadata.name }}}}-own"
      data: {{a: "1"}}
      ---
{shared}
"""


def install(
    api: client.ApiClient, catalog_namespace: str, tmp_path: Path, name: str, shared: str, *namespaces: str
) -> str:
    """The plan, and its own account: bound in ``namespaces`` (where it writes, which the plan declares too:
    ``spec.namespaces``), cluster-wide for ClusterRoles — and for reading ConfigMaps, which the ClusterRole it
    renders grants (RBAC grants only what one holds)."""
    grant_plan_account(
        api,
        catalog_namespace,
        [],
        account=ACCOUNT,
        cluster_rules=[
            {"api_groups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": list(OWNER_VERBS)},
            {"api_groups": [""], "resources": ["configmaps"], "verbs": ["get"]},
        ],
    )
    for namespace in namespaces:
        onboard_namespace(api, namespace, control_plane=catalog_namespace, plan_accounts=(ACCOUNT,))
    indented = "\n".join("      " + line for line in shared.strip("\n").splitlines())
    path = tmp_path / f"{name}.yaml"
    path.write_text(PLAN.format(name=name, account=ACCOUNT, shared=indented, namespaces=list(namespaces)))
    apply_yaml(api, path, catalog_namespace)
    return name


def users_of(obj: Any) -> list[str]:
    return sorted(json.loads((obj.metadata.annotations or {}).get(USERS, "[]")))


def shared_by_three(api: client.ApiClient, namespace: str, plan: str, read: Callable[[], Any]) -> None:
    """Three instances share the object; it survives the first two deprovisions and goes with the last."""
    names = ["u1", "u2", "u3"]
    for name in names:
        provision(api, namespace, name, plan_id=plan)
    uids = {
        name: wait_state(api, namespace, "sfserviceinstances", name, "succeeded")["metadata"]["uid"] for name in names
    }
    shared = read()
    assert shared is not None and users_of(shared) == sorted(uids.values())
    creator = shared.data["creator"] if hasattr(shared, "data") and shared.data else None
    for i, name in enumerate(names):
        custom(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", name)
        wait_for(lambda n=name: gone(api, namespace, "sfserviceinstances", n), 30, f"{name} to be deprovisioned")
        shared = read()
        if i < len(names) - 1:
            assert shared is not None, f"deleted with {name}, while {names[i + 1 :]} still use it"
            assert users_of(shared) == sorted(uids[n] for n in names[i + 1 :])
            if creator is not None:
                assert shared.data["creator"] == creator, "left as the first instance made it"
        else:
            wait_for(lambda: read() is None, 30, "the last user to take it along")


def test_a_cluster_role_shared_by_three_instances_goes_with_the_last(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Path
) -> None:
    role = f"shared-reader-{namespace}"
    plan = install(
        api_client,
        catalog_namespace,
        tmp_path,
        f"cr-{namespace}",
        f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {role}
  annotations:
    opbroker.io/singleton: "true"
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
""",
        namespace,
    )
    rbac = client.RbacAuthorizationV1Api(api_client)

    def read() -> Any:
        try:
            return rbac.read_cluster_role(role)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    try:
        shared_by_three(api_client, namespace, plan, read)
    finally:
        if read() is not None:
            rbac.delete_cluster_role(role)


def test_a_config_map_in_another_namespace_shared_by_three_instances_goes_with_the_last(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(api_client)
    side = f"{namespace}-shared"
    core.create_namespace({"metadata": {"name": side}})
    try:
        plan = install(
            api_client,
            catalog_namespace,
            tmp_path,
            f"cm-{namespace}",
            f"""
apiVersion: v1
kind: ConfigMap
metadata:
  name: shared-settings
  namespace: {side}
  annotations:
    opbroker.io/singleton: "true"
data:
  creator: "{{{{ instance.metadata.name }}}}"
""",
            namespace,
            side,
        )

        def read() -> Any:
            try:
                return core.read_namespaced_config_map("shared-settings", side)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise

        shared_by_three(api_client, namespace, plan, read)
    finally:
        core.delete_namespace(side)
