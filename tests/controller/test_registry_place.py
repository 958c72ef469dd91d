"""Where the running controller keeps registries (issue 29): in the control plane's namespace, out of a
consumer's reach; one left at its old place by an earlier version is moved without changing a generated value."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import DEFAULT_NAMESPACE, LABEL_MANAGED_BY, MANAGED_BY
from opbroker.controller.osb.registries import encode
from tests.controller.test_lifecycle import GROUP, VERSION, custom, gone, provision, wait_state
from tests.controller_support import apply_yaml, wait_for
from tests.tenancy_support import Tenant

pytestmark = pytest.mark.usefixtures("controller")

PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {{name: {name}}}
spec:
  name: {name}
  id: {name}
  serviceId: 6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11
  description: a plan generating an admin password
  templates:
  - action: provision
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: "{{{{ instance.metadata.name }}}}-admin"
      data:
        password: "{{{{ generatePassword('admin', 24) }}}}"
"""


def install(api: client.ApiClient, catalog_namespace: str, tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(PLAN.format(name=name))
    apply_yaml(api, path, catalog_namespace)
    return name


def registry_name(uid: str) -> str:
    return f"opbroker-instance-registry-{uid}"


def test_a_consumer_cannot_read_its_instances_registry(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tenant: Tenant, tmp_path: Path
) -> None:
    plan = install(api_client, catalog_namespace, tmp_path, f"reg-{namespace}")
    provision(api_client, namespace, "kept", plan_id=plan)
    instance = wait_state(api_client, namespace, "sfserviceinstances", "kept", "succeeded")
    core = client.CoreV1Api(api_client)
    password = core.read_namespaced_config_map("kept-admin", namespace).data["password"]
    name = registry_name(instance["metadata"]["uid"])
    registry = core.read_namespaced_secret(name, DEFAULT_NAMESPACE)
    assert json.loads(base64.b64decode(registry.data["admin"])) == password

    # The tenant, with every right on Secrets of its namespace, finds no registry there and reads none elsewhere.
    mine = tenant.core.list_namespaced_secret(namespace).items
    assert all(s.metadata.name != "kept-registry" for s in mine)
    assert all(password.encode() not in base64.b64decode(v) for s in mine for v in (s.data or {}).values())
    with pytest.raises(ApiException) as refused:
        tenant.core.read_namespaced_secret(name, DEFAULT_NAMESPACE)
    assert refused.value.status == 403

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", "kept")
    wait_for(lambda: gone(api_client, namespace, "sfserviceinstances", "kept"), 30, "the instance to go")
    names = [s.metadata.name for s in core.list_namespaced_secret(DEFAULT_NAMESPACE).items]
    assert name not in names, "deleted with its instance, though no owner reference reaches it"


def test_a_registry_at_its_old_place_is_moved_and_the_password_is_unchanged(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Path
) -> None:
    """An upgrade: the instance's registry still beside it, as an earlier version wrote it (owned by the
    instance). The controller renders with it, moves it, and the password it generated earlier stays."""
    plan_name = f"moved-{namespace}"
    provision(api_client, namespace, "old", plan_id=plan_name)  # its plan comes later: nothing renders yet
    instance = wait_state(api_client, namespace, "sfserviceinstances", "old", "failed")
    uid = instance["metadata"]["uid"]
    core = client.CoreV1Api(api_client)
    earlier = "generated-by-an-earlier-version-0123"
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {
                "name": "old-registry",
                "labels": {LABEL_MANAGED_BY: MANAGED_BY, "opbroker.io/instance": "old", "opbroker.io/plan": plan_name},
                "annotations": {"opbroker.io/owner-uid": uid},
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "SFServiceInstance",
                        "name": "old",
                        "uid": uid,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "data": encode({"admin": earlier, "instance-id": "old"}),
        },
    )
    install(api_client, catalog_namespace, tmp_path, plan_name)
    wait_state(api_client, namespace, "sfserviceinstances", "old", "succeeded")
    assert core.read_namespaced_config_map("old-admin", namespace).data["password"] == earlier
    moved = core.read_namespaced_secret(registry_name(uid), DEFAULT_NAMESPACE)
    assert json.loads(base64.b64decode(moved.data["admin"])) == earlier
    wait_for(
        lambda: not core.list_namespaced_secret(namespace, field_selector="metadata.name=old-registry").items,
        10,
        "the old place to be emptied",
    )
