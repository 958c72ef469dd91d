"""The controller against the real control plane, driven through the custom resources alone.

The session's controller polls only every 60 s, so every reaction inside these tests' timeouts comes from
watches (of our resources and of the operator's objects the plans name).
"""

from __future__ import annotations

import base64
import datetime
import json
import random
import time
import uuid
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import CREDENTIALS_KEY, DEFAULT_NAMESPACE, FINALIZER
from opbroker.controller.core import decisions
from opbroker.controller.core.views import BindingView
from opbroker.devcluster import ControlPlane
from tests.cluster_fixtures import onboard
from tests.controller_idle import progress, wait_handled
from tests.controller_support import Process, apply_yaml, controller_command, wait_for

GROUP, VERSION = "osb.servicefabrik.io", "v1alpha1"
SERVICE_ID = "6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11"
PLAN_ID = "0b9bd3f2-8d55-4a0b-9c1e-55c9a4e3d7a2"
DB = ("demo.opbroker.io", "v1alpha1", "databases")

pytestmark = pytest.mark.usefixtures("controller")


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def provision(
    api: client.ApiClient,
    namespace: str,
    name: str,
    *,
    plan_id: str = PLAN_ID,
    service_id: str = SERVICE_ID,
    parameters: dict[str, Any] | None = None,
) -> None:
    """What the broker does for a provision request: the instance, then its requested state."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SFServiceInstance",
        "metadata": {"name": name},
        "spec": {"instanceId": name, "serviceId": service_id, "planId": plan_id, "parameters": parameters or {}},
    }
    custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", body)


def bind(
    api: client.ApiClient,
    namespace: str,
    name: str,
    instance: str,
    *,
    service_id: str = SERVICE_ID,
    plan_id: str = PLAN_ID,
) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SFServiceBinding",
        "metadata": {"name": name},
        "spec": {"id": name, "instanceId": instance, "serviceId": service_id, "planId": plan_id},
    }
    custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "sfservicebindings", body)


def get(
    api: client.ApiClient, namespace: str, plural: str, name: str, group: str = GROUP, version: str = VERSION
) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = custom(api).get_namespaced_custom_object(group, version, namespace, plural, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def state_of(api: client.ApiClient, namespace: str, plural: str, name: str) -> str | None:
    obj = get(api, namespace, plural, name)
    return ((obj or {}).get("status") or {}).get("state")


def wait_state(
    api: client.ApiClient, namespace: str, plural: str, name: str, state: str, timeout: float = 30
) -> dict[str, Any]:
    wait_for(lambda: state_of(api, namespace, plural, name) == state, timeout, f"{plural}/{name} to be {state!r}")
    found = get(api, namespace, plural, name)
    assert found is not None
    return found


def gone(
    api: client.ApiClient, namespace: str, plural: str, name: str, group: str = GROUP, version: str = VERSION
) -> bool:
    return get(api, namespace, plural, name, group, version) is None


def test_provision_bind_unbind_deprovision(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    provision(api_client, namespace, "db1", parameters={"version": "15"})
    instance = wait_state(api_client, namespace, "sfserviceinstances", "db1", "succeeded")
    assert FINALIZER in instance["metadata"]["finalizers"]
    status = instance["status"]
    assert status["resources"] == [
        {"apiVersion": "demo.opbroker.io/v1alpha1", "kind": "Database", "name": "db1", "namespace": namespace}
    ]
    assert status["dashboardUrl"] == "https://dashboard.example.com/databases/db1"
    assert status["observedGeneration"] == instance["metadata"]["generation"]
    assert [c["status"] for c in status["conditions"] if c["type"] == "Ready"] == ["True"]
    database = get(api_client, namespace, "databases", "db1", *DB[:2])
    assert database is not None and database["spec"]["version"] == "15"
    assert database["metadata"]["ownerReferences"][0]["uid"] == instance["metadata"]["uid"]
    # The registry is kept in the control plane's namespace (issue 29), named by the instance's uid.
    assert not core.list_namespaced_secret(namespace, field_selector="metadata.name=db1-registry").items
    registry = core.read_namespaced_secret(
        f"opbroker-instance-registry-{instance['metadata']['uid']}", DEFAULT_NAMESPACE
    )
    assert json.loads(base64.b64decode(registry.data["instance-id"])) == "db1"

    bind(api_client, namespace, "b1", "db1")
    binding = wait_state(api_client, namespace, "sfservicebindings", "b1", "succeeded")
    secret_name = binding["status"]["response"]["secretRef"]
    response = json.loads(base64.b64decode(core.read_namespaced_secret(secret_name, namespace).data[CREDENTIALS_KEY]))
    credentials = response["credentials"]
    assert credentials["port"] == 5432 and credentials["hostname"]
    users = get(api_client, namespace, "databases", "db1", *DB[:2])["spec"]["users"]  # type: ignore[index]
    assert set(users) == {"main", credentials["username"]}
    # The password is in the credentials Secret only: not in any status, nor in any event.
    assert credentials["password"] not in json.dumps(binding)
    events = core.list_namespaced_event(namespace).items
    assert events and all(credentials["password"] not in (e.message or "") for e in events)

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfservicebindings", "b1")
    wait_for(lambda: gone(api_client, namespace, "sfservicebindings", "b1"), 30, "the binding to be released")
    users = get(api_client, namespace, "databases", "db1", *DB[:2])["spec"]["users"]  # type: ignore[index]
    assert set(users) == {"main"}, "unbind must remove exactly the binding's user"

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", "db1")
    wait_for(lambda: gone(api_client, namespace, "sfserviceinstances", "db1"), 30, "the instance to be released")
    assert gone(api_client, namespace, "databases", "db1", *DB[:2])
    # The garbage collector watches a custom resource kind only after its discovery resync (every 30 s)
    # has seen the CRD: when this test runs first in a fresh control plane (alone, say) the Secrets go up
    # to ~30 s after their owners (measured on 1.37.2: 44 s for the whole test when run alone).
    wait_for(
        lambda: (
            not core.list_namespaced_secret(namespace, label_selector="app.kubernetes.io/managed-by=opbroker").items
        ),
        90,
        "registry and credentials Secrets to be collected",
    )
    # The registries went with their instance and binding, though no owner reference could reach them.
    assert not core.list_namespaced_secret(
        DEFAULT_NAMESPACE, label_selector=f"opbroker.io/owner-namespace={namespace}"
    ).items


def test_deprovision_waits_while_bindings_exist(api_client: client.ApiClient, namespace: str) -> None:
    provision(api_client, namespace, "db2")
    wait_state(api_client, namespace, "sfserviceinstances", "db2", "succeeded")
    bind(api_client, namespace, "b2", "db2")
    wait_state(api_client, namespace, "sfservicebindings", "b2", "succeeded")
    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", "db2")
    instance = wait_state(api_client, namespace, "sfserviceinstances", "db2", "failed")
    assert instance["status"]["error"] == "cannot deprovision: 1 binding(s) still exist; unbind them first"
    assert get(api_client, namespace, "databases", "db2", *DB[:2]) is not None, "nothing may be deleted yet"
    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfservicebindings", "b2")
    wait_for(lambda: gone(api_client, namespace, "sfserviceinstances", "db2"), 30, "deprovision to resume once unbound")
    assert gone(api_client, namespace, "databases", "db2", *DB[:2])


def test_operator_failure_is_reported_with_its_reason(api_client: client.ApiClient, namespace: str) -> None:
    provision(api_client, namespace, "db3", parameters={"failWith": "disk quota exceeded"})
    instance = wait_state(api_client, namespace, "sfserviceinstances", "db3", "failed")
    assert instance["status"]["error"] == "disk quota exceeded"
    assert [c["reason"] for c in instance["status"]["conditions"]] == ["Failed"]


TWO_OBJECT_PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {{name: {name}}}
spec:
  name: {name}
  id: {name}
  serviceId: 6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11
  description: a plan whose second version drops an object
  autoUpdateInstances: true
  templates:
  - action: provision
    type: jinja2
    content: |
      apiVersion: demo.opbroker.io/v1alpha1
      kind: Database
      metadata:
        name: {{{{ instance.metadata.name }}}}
      spec:
        engine: postgresql
        storageGB: {storage}
      {extra}
"""
CONFIG_MAP = """---
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{ instance.metadata.name }}-settings
      data:
        tuning: fast"""


def test_plan_update_rerenders_instances_and_deletes_what_is_no_longer_rendered(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Any
) -> None:
    plan_name = f"two-objects-{namespace}"
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(TWO_OBJECT_PLAN.format(name=plan_name, storage=1, extra=CONFIG_MAP))
    apply_yaml(api_client, plan_file, catalog_namespace)
    provision(api_client, namespace, "db4", plan_id=plan_name)
    wait_state(api_client, namespace, "sfserviceinstances", "db4", "succeeded")
    core = client.CoreV1Api(api_client)
    assert core.read_namespaced_config_map("db4-settings", namespace).data == {"tuning": "fast"}

    plan_file.write_text(TWO_OBJECT_PLAN.format(name=plan_name, storage=5, extra=""))
    apply_yaml(api_client, plan_file, catalog_namespace)

    def rerendered() -> bool:
        database = get(api_client, namespace, "databases", "db4", *DB[:2])
        return bool(database and database["spec"]["storageGB"] == 5)

    wait_for(rerendered, 30, "the instance to be re-rendered with the new plan")

    def config_map_gone() -> bool:
        try:
            core.read_namespaced_config_map("db4-settings", namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(config_map_gone, 30, "the object the new plan no longer renders to be deleted")
    instance = wait_state(api_client, namespace, "sfserviceinstances", "db4", "succeeded")
    assert [r["kind"] for r in instance["status"]["resources"]] == ["Database"]


def test_killed_controller_converges_without_duplicates(
    api_client: client.ApiClient, namespace: str, controller: Process
) -> None:
    rng = random.Random(7)
    names = [f"k{i}" for i in range(6)]
    for name in names:
        provision(api_client, namespace, name)
        time.sleep(rng.uniform(0.0, 0.4))
        controller.kill()
        controller.start()
    for name in names:
        instance = wait_state(api_client, namespace, "sfserviceinstances", name, "succeeded", timeout=60)
        assert len(instance["status"]["resources"]) == 1
        database = get(api_client, namespace, "databases", name, *DB[:2])
        assert database is not None
        owners = database["metadata"]["ownerReferences"]
        assert [o["uid"] for o in owners] == [instance["metadata"]["uid"]], "exactly one owner reference"
        assert instance["metadata"]["finalizers"].count(FINALIZER) == 1
    databases = custom(api_client).list_namespaced_custom_object(*DB[:2], namespace, DB[2])["items"]
    assert sorted(d["metadata"]["name"] for d in databases) == names
    registries = (
        client.CoreV1Api(api_client)
        .list_namespaced_secret(DEFAULT_NAMESPACE, label_selector=f"opbroker.io/owner-namespace={namespace}")
        .items
    )
    assert sorted(s.metadata.labels["opbroker.io/instance"] for s in registries) == names


def test_a_bind_that_raced_a_deprovision_does_not_block_it(api_client: client.ApiClient, namespace: str) -> None:
    """Both accepted by the broker: the instance is deleted while a binding nobody completed appears."""
    provision(api_client, namespace, "race1")
    wait_state(api_client, namespace, "sfserviceinstances", "race1", "succeeded")
    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", "race1")
    bind(api_client, namespace, "late1", "race1")
    wait_for(lambda: gone(api_client, namespace, "sfservicebindings", "late1"), 30, "the never-completed binding to go")
    wait_for(lambda: gone(api_client, namespace, "sfserviceinstances", "race1"), 30, "the deprovision to finish")
    assert gone(api_client, namespace, "databases", "race1", *DB[:2])


STALLING_PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {{name: {name}}}
spec:
  name: {name}
  id: {name}
  serviceId: 6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11
  description: an operator that never reports a provision (with stall) or a bind
  templates:
  - action: provision
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{{{ instance.metadata.name }}}}-stall
      data: {{stall: "yes"}}
  - action: status
    type: jinja2
    content: |
      provision:
        state: {{{{ "in progress" if parameter("/stall", false) else "succeeded" }}}}
      bind:
        state: in progress
"""


def test_an_operation_without_outcome_fails_after_the_maximum_duration(
    api_client: client.ApiClient,
    namespace: str,
    catalog_namespace: str,
    control_plane: ControlPlane,
    controller: Process,
    tmp_path: Any,
) -> None:
    """A silent operator must not leave an operation in progress forever (issue 18's lifecycle fault): past
    ``--max-operation-seconds`` a provision or a bind fails with reason OperationTimedOut; operations that do
    report an outcome are unaffected."""
    plan_name = f"stalling-{namespace}"
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(STALLING_PLAN.format(name=plan_name))
    apply_yaml(api_client, plan_file, catalog_namespace)
    controller.stop()  # the session's controller has no short limit; this one fails operations after 4 s
    limited = Process("controller-limited", controller_command(control_plane, "--max-operation-seconds", "4"), tmp_path)
    limited.start()
    try:
        provision(api_client, namespace, "quiet1", plan_id=plan_name, parameters={"stall": True})
        provision(api_client, namespace, "fine1", plan_id=plan_name)
        fine = wait_state(api_client, namespace, "sfserviceinstances", "fine1", "succeeded")
        assert fine["status"]["operationStartedAt"]  # started by the controller: no broker asked
        assert "lastOperation" not in fine["status"]  # the broker's record, never written by the controller
        quiet = wait_state(api_client, namespace, "sfserviceinstances", "quiet1", "failed", timeout=30)
        assert "timed out: no outcome " in quiet["status"]["error"]
        ready = next(c for c in quiet["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "OperationTimedOut")
        assert quiet["status"]["resources"], "the apply is recorded with the failure"

        bind(api_client, namespace, "quietb1", "fine1", plan_id=plan_name)
        binding = wait_state(api_client, namespace, "sfservicebindings", "quietb1", "failed", timeout=30)
        assert "timed out: no outcome " in binding["status"]["error"]
        started = decisions.operation_age(BindingView.of(binding).status, at=datetime.datetime.now(datetime.UTC))
        assert started is not None and started >= 4
    finally:
        limited.stop()
        controller.start()


FRAGILE_PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {{name: {name}}}
spec:
  name: {name}
  id: {name}
  serviceId: 6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11
  description: a status template that requires its source, so cannot render once it is gone
  templates:
  - action: sources
    type: jinja2
    content: |
      database: {{apiVersion: demo.opbroker.io/v1alpha1, kind: Database, name: "{{{{ instance.metadata.name }}}}"}}
  - action: provision
    type: jinja2
    content: |
      apiVersion: demo.opbroker.io/v1alpha1
      kind: Database
      metadata:
        name: {{{{ instance.metadata.name }}}}
      spec:
        engine: postgresql
  - action: status
    type: jinja2
    content: |
      {{% set db = required(database, "the database") %}}
      provision:
        state: {{{{ "succeeded" if db.status.phase == "Running" else "in progress" }}}}
"""


def test_deprovision_finishes_when_the_status_template_cannot_render_after_everything_is_gone(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Any
) -> None:
    """Issue 18's lifecycle fault: a status template that reads a source without guarding its absence fails
    once teardown deleted that source. The controller used to retry, give up and keep its finalizer, so the
    DELETE hung for good; now, with every recorded object gone, it finishes and says why in a Warning event."""
    plan_name = f"fragile-{namespace}"
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(FRAGILE_PLAN.format(name=plan_name))
    apply_yaml(api_client, plan_file, catalog_namespace)
    provision(api_client, namespace, "fragile1", plan_id=plan_name)
    wait_state(api_client, namespace, "sfserviceinstances", "fragile1", "succeeded")
    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", "fragile1")
    wait_for(lambda: gone(api_client, namespace, "sfserviceinstances", "fragile1"), 30, "the instance to be released")
    assert gone(api_client, namespace, "databases", "fragile1", *DB[:2])
    events = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
    unconfirmed = [e for e in events if e.reason == "DeprovisionUnconfirmed" and e.involved_object.name == "fragile1"]
    assert unconfirmed and unconfirmed[0].type == "Warning"
    assert "every recorded object is deleted; the status template could not confirm it" in unconfirmed[0].message


REVOKING_PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {{name: {name}}}
spec:
  name: {name}
  id: {name}
  serviceId: 6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11
  description: an unbind that creates an object (a revocation record), as plans do to hand work to an operator
  templates:
  - action: provision
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{{{ instance.metadata.name }}}}-db
      data: {{size: small}}
  - action: bind
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{{{ binding.metadata.name }}}}-grant
      data: {{user: "{{{{ binding.metadata.name }}}}"}}
  - action: unbind
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{{{ binding.metadata.name }}}}-revoke
      data: {{user: "{{{{ binding.metadata.name }}}}"}}
  - action: status
    type: jinja2
    content: |
      provision:
        state: succeeded
      bind:
        state: succeeded
        response:
          credentials: {{user: "{{{{ binding.metadata.name if binding else '' }}}}"}}
      unbind:
        state: succeeded
      deprovision:
        state: succeeded
"""


def test_deleting_a_namespace_that_holds_a_bound_instance_finishes(
    api_client: client.ApiClient, catalog_namespace: str, tmp_path: Any
) -> None:
    """Issue 18's lifecycle fault: a binding's teardown applied its unbind template into the terminating
    namespace, got 403 ("... because it is being terminated") and retried forever, and the instance waited on
    it, so the namespace never went. Now teardown creates nothing there, and both finalizers are released."""
    core = client.CoreV1Api(api_client)
    name = f"t-gone-{uuid.uuid4().hex[:8]}"
    plan_name = f"revoking-{name}"
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(REVOKING_PLAN.format(name=plan_name))
    apply_yaml(api_client, plan_file, catalog_namespace)
    core.create_namespace({"metadata": {"name": name, "labels": {"opbroker.io/test": "true"}}})
    onboard(api_client, name)  # the plan account writes only where it is bound
    for db in ("nsdb1", "nsdb2"):  # the demo operator's plan, and one whose unbind creates an object
        provision(api_client, name, db, **({"plan_id": plan_name} if db == "nsdb2" else {}))
    for db, plan in (("nsdb1", PLAN_ID), ("nsdb2", plan_name)):
        wait_state(api_client, name, "sfserviceinstances", db, "succeeded")
        bind(api_client, name, f"b-{db}", db, plan_id=plan)
        wait_state(api_client, name, "sfservicebindings", f"b-{db}", "succeeded")
    core.delete_namespace(name)

    def namespace_gone() -> bool:
        try:
            core.read_namespace(name)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(namespace_gone, 90, f"namespace {name} to be deleted")


def test_binding_credentials_follow_a_rotated_password(
    api_client: client.ApiClient, namespace: str, controller_metrics_port: int
) -> None:
    """Issue 18: the credentials Secret (which the broker's GET binding answers from) was written once; after
    the operator rotated the user's password it kept the old one. A bound binding now keeps following what
    its status template read, and rewrites the Secret when, and only when, the credentials changed."""
    core = client.CoreV1Api(api_client)
    provision(api_client, namespace, "rot1")
    wait_state(api_client, namespace, "sfserviceinstances", "rot1", "succeeded")
    bind(api_client, namespace, "rotb1", "rot1")
    binding = wait_state(api_client, namespace, "sfservicebindings", "rotb1", "succeeded")
    secret_name = binding["status"]["response"]["secretRef"]

    def credentials() -> dict[str, Any]:
        data = core.read_namespaced_secret(secret_name, namespace).data[CREDENTIALS_KEY]
        found: dict[str, Any] = json.loads(base64.b64decode(data))["credentials"]
        return found

    old = credentials()
    (source,) = [
        s
        for s in core.list_namespaced_secret(namespace, label_selector="demo.opbroker.io/database=rot1").items
        if s.metadata.labels.get("demo.opbroker.io/user") == old["username"]
    ]
    written = core.read_namespaced_secret(secret_name, namespace).metadata.resource_version
    # A change of the source that leaves the credentials as they are writes nothing: the change queues the binding
    # (its status template reads the source); once a binding was reconciled and nothing is due, it was looked at.
    before = progress(controller_metrics_port)
    core.patch_namespaced_secret(source.metadata.name, namespace, {"metadata": {"annotations": {"touched": "yes"}}})
    wait_handled(controller_metrics_port, before, "binding", 30, "the binding reconciled after its source changed")
    assert core.read_namespaced_secret(secret_name, namespace).metadata.resource_version == written

    rotated = "rotated-" + uuid.uuid4().hex
    core.patch_namespaced_secret(source.metadata.name, namespace, {"stringData": {"password": rotated}})
    wait_for(lambda: credentials()["password"] == rotated, 30, "the credentials Secret to follow the rotation")
    assert credentials()["uri"] == old["uri"].replace(old["password"], rotated)
    binding = get(api_client, namespace, "sfservicebindings", "rotb1")
    assert binding is not None and binding["status"]["state"] == "succeeded"
    assert rotated not in json.dumps(binding)
    events = core.list_namespaced_event(namespace).items
    assert any(e.reason == "CredentialsRotated" and e.involved_object.name == "rotb1" for e in events)
    assert all(rotated not in (e.message or "") for e in events)


GUARDED_PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {{name: {name}}}
spec:
  name: {name}
  id: {name}
  serviceId: 6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11
  description: a plan deleted while an instance uses it
  templates:
  - action: provision
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{{{ instance.metadata.name }}}}-guarded
      data: {{size: "{{{{ parameter('/size', 1) }}}}"}}
"""


def test_a_plan_in_use_is_not_deleted_until_its_instances_are(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Any
) -> None:
    """Issue 18: an SFPlan could be deleted under live instances. The controller holds a finalizer on it while
    instances use it; deleted meanwhile, it says why it waits (Ready=False PlanInUse, and an Event), takes no
    new instances, serves its existing ones, and goes once they are deprovisioned."""
    core = client.CoreV1Api(api_client)
    plan_name = f"guarded-{namespace}"
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(GUARDED_PLAN.format(name=plan_name))
    apply_yaml(api_client, plan_file, catalog_namespace)
    provision(api_client, namespace, "used1", plan_id=plan_name)
    wait_state(api_client, namespace, "sfserviceinstances", "used1", "succeeded")
    found = get(api_client, catalog_namespace, "sfplans", plan_name)
    assert found is not None and FINALIZER in found["metadata"]["finalizers"]

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, catalog_namespace, "sfplans", plan_name)

    def ready_reason() -> str | None:
        body = get(api_client, catalog_namespace, "sfplans", plan_name) or {}
        ready = [c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
        return ready[0]["reason"] if ready and ready[0]["status"] == "False" else None

    wait_for(lambda: ready_reason() == "PlanInUse", 30, "the plan to say why its deletion waits")
    waiting = get(api_client, catalog_namespace, "sfplans", plan_name)
    assert waiting is not None and waiting["metadata"]["deletionTimestamp"]
    (ready,) = [c for c in waiting["status"]["conditions"] if c["type"] == "Ready"]
    assert ready["message"].startswith("deletion waits: 1 service instance(s) still use this plan")
    events = core.list_namespaced_event(catalog_namespace).items
    assert any(e.reason == "PlanInUse" and e.involved_object.name == plan_name for e in events)

    # No new instances; the existing one keeps working (an update is applied).
    provision(api_client, namespace, "late2", plan_id=plan_name)
    late = wait_state(api_client, namespace, "sfserviceinstances", "late2", "failed")
    assert late["status"]["error"] == f"plan {plan_name!r} is being deleted: it takes no new instances"
    custom(api_client).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "sfserviceinstances", "used1", {"spec": {"parameters": {"size": 2}}}
    )
    wait_for(
        lambda: core.read_namespaced_config_map("used1-guarded", namespace).data == {"size": "2"},
        30,
        "the existing instance to be updated",
    )
    assert get(api_client, catalog_namespace, "sfplans", plan_name) is not None

    for name in ("late2", "used1"):
        custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", name)
    wait_for(lambda: gone(api_client, namespace, "sfserviceinstances", "used1"), 30, "the instance to be deprovisioned")
    wait_for(
        lambda: gone(api_client, catalog_namespace, "sfplans", plan_name), 30, "the plan to go with its last instance"
    )


GUARDED_SERVICE = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFService
metadata: {{name: {name}}}
spec:
  name: {name}
  id: {name}
  description: a service deleted while a plan and an instance use it
  bindable: true
"""


def test_a_service_in_use_is_not_deleted_until_its_plans_and_instances_are(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Any
) -> None:
    """Issue 29: an SFService could be deleted under its plans and instances (only SFPlan was guarded). The
    controller holds a finalizer on it while plans or instances name it; deleted meanwhile, it says why it waits
    (Ready=False ServiceInUse, and an Event) and goes with the last of them."""
    core = client.CoreV1Api(api_client)
    service_name, plan_name = f"gsvc-{namespace}", f"gsvc-plan-{namespace}"
    (tmp_path / "service.yaml").write_text(GUARDED_SERVICE.format(name=service_name))
    plan_text = GUARDED_PLAN.format(name=plan_name).replace(f"serviceId: {SERVICE_ID}", f"serviceId: {service_name}")
    (tmp_path / "plan.yaml").write_text(plan_text)
    apply_yaml(api_client, tmp_path / "service.yaml", catalog_namespace)
    apply_yaml(api_client, tmp_path / "plan.yaml", catalog_namespace)

    def service() -> dict[str, Any] | None:
        return get(api_client, catalog_namespace, "sfservices", service_name)

    wait_for(lambda: FINALIZER in ((service() or {})["metadata"].get("finalizers") or []), 30, "the service held")
    provision(api_client, namespace, "svcuser", plan_id=plan_name, service_id=service_name)
    wait_state(api_client, namespace, "sfserviceinstances", "svcuser", "succeeded")

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, catalog_namespace, "sfservices", service_name)

    def ready_message() -> str | None:
        ready = [c for c in ((service() or {}).get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
        return ready[0]["message"] if ready and ready[0]["reason"] == "ServiceInUse" else None

    wait_for(lambda: ready_message() is not None, 30, "the service to say why its deletion waits")
    assert ready_message() == (
        "deletion waits: 1 plan(s) and 1 service instance(s) still use this service; it goes once they are gone"
    )
    waiting = service()
    assert waiting is not None and waiting["metadata"]["deletionTimestamp"]
    events = core.list_namespaced_event(catalog_namespace).items
    assert any(e.reason == "ServiceInUse" and e.involved_object.name == service_name for e in events)

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", "svcuser")
    wait_for(lambda: gone(api_client, namespace, "sfserviceinstances", "svcuser"), 30, "the instance to go")
    wait_for(
        lambda: (ready_message() or "").startswith("deletion waits: 1 plan(s) and 0 service instance(s)"),
        40,
        "the service to wait for its plan alone",
    )
    assert service() is not None

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, catalog_namespace, "sfplans", plan_name)
    wait_for(lambda: service() is None, 30, "the service to go with its last plan")


WAITING_REVOKE_PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata: {{name: {name}}}
spec:
  name: {name}
  id: {name}
  serviceId: 6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11
  description: an unbind that creates an object and waits for someone else to finish it (a Job that drops a role)
  templates:
  - action: provision
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{{{ instance.metadata.name }}}}-db
      data: {{size: small}}
  - action: sources
    type: jinja2
    content: |
      {{% if binding %}}
      revoke:
        apiVersion: v1
        kind: ConfigMap
        name: {{{{ binding.metadata.name }}}}-revoke
        namespace: {{{{ instance.metadata.namespace }}}}
      {{% endif %}}
  - action: unbind
    type: jinja2
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: {{{{ binding.metadata.name }}}}-revoke
      data: {{user: "{{{{ binding.metadata.name }}}}"}}
  - action: status
    type: jinja2
    content: |
      provision:
        state: succeeded
      bind:
        state: succeeded
        response:
          credentials: {{user: "{{{{ binding.metadata.name if binding else '' }}}}"}}
      unbind:
        state: {{{{ "succeeded" if revoke.metadata.annotations.done | default("") == "true" else "in progress" }}}}
      deprovision:
        state: succeeded
"""


def test_an_unbind_that_waits_for_its_own_object_applies_it_again_and_it_is_the_bindings(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Any, controller_metrics_port: int
) -> None:
    """The PostgreSQL plan's unbind Job (examples/postgresql-statefulset): the unbind template's object is
    applied on every pass while the status template waits for it. It was applied unstamped, so the second pass
    refused it as someone else's object and failed the unbind; now it is stamped and owned by the binding
    (the garbage collector takes it when the binding goes)."""
    core = client.CoreV1Api(api_client)
    plan_name = f"waiting-revoke-{uuid.uuid4().hex[:8]}"
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(WAITING_REVOKE_PLAN.format(name=plan_name))
    apply_yaml(api_client, plan_file, catalog_namespace)
    provision(api_client, namespace, "wr1", plan_id=plan_name)
    wait_state(api_client, namespace, "sfserviceinstances", "wr1", "succeeded")
    bind(api_client, namespace, "b-wr1", "wr1", plan_id=plan_name)
    binding = wait_state(api_client, namespace, "sfservicebindings", "b-wr1", "succeeded")
    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfservicebindings", "b-wr1")

    def revoke() -> client.V1ConfigMap | None:
        try:
            return core.read_namespaced_config_map("b-wr1-revoke", namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    created = wait_for(revoke, 30, "the unbind's ConfigMap")
    # Passes that find the object waiting (its own watch and a status poll) apply it again: still unbinding. The
    # change queues the binding: once a binding was reconciled and nothing is due, that pass has run.
    before = progress(controller_metrics_port)
    core.patch_namespaced_config_map("b-wr1-revoke", namespace, {"metadata": {"labels": {"touched": "1"}}})
    wait_handled(controller_metrics_port, before, "binding", 30, "the unbinding binding reconciled again")
    assert state_of(api_client, namespace, "sfservicebindings", "b-wr1") == "in progress", get(
        api_client, namespace, "sfservicebindings", "b-wr1"
    )
    assert created.metadata.annotations.get("opbroker.io/owner-uid") == binding["metadata"]["uid"]
    assert [r.uid for r in created.metadata.owner_references or []] == [binding["metadata"]["uid"]]
    core.patch_namespaced_config_map("b-wr1-revoke", namespace, {"metadata": {"annotations": {"done": "true"}}})
    wait_for(lambda: gone(api_client, namespace, "sfservicebindings", "b-wr1"), 30, "the binding to go")
