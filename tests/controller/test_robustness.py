"""Controller robustness on the real control plane: giving up, shared and cross-namespace objects,
active-passive replicas with leader election, metrics."""

from __future__ import annotations

import base64
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports
from tests.cluster_fixtures import onboard
from tests.controller.test_lifecycle import GROUP, VERSION, custom, gone, provision, wait_state
from tests.controller_support import Process, apply_yaml, controller_command, wait_for

pytestmark = pytest.mark.usefixtures("controller")

PLAN = """
apiVersion: osb.servicefabrik.io/v1alpha1
kind: SFPlan
metadata:
  name: {name}
spec:
  name: {name}
  id: {name}
  serviceId: 6f4e7a0c-2f0a-4d5e-9b1a-0d6c1e0f5a11
  description: a plan made for one test
  namespaces: {namespaces}
  templates:
  - action: provision
    type: jinja2
    content: |
{content}
"""


def install_plan(
    api: client.ApiClient,
    catalog_namespace: str,
    tmp_path: Path,
    name: str,
    content: str,
    namespaces: tuple[str, ...] = (),
) -> str:
    """The plan, declaring ``namespaces`` besides the instance's as where it may write (``spec.namespaces``)."""
    path = tmp_path / f"{name}.yaml"
    indented = "\n".join("      " + line for line in content.strip("\n").splitlines())
    path.write_text(PLAN.format(name=name, content=indented, namespaces=list(namespaces)))
    apply_yaml(api, path, catalog_namespace)
    return name


def config_map(api: client.ApiClient, namespace: str, name: str) -> Any:
    try:
        return client.CoreV1Api(api).read_namespaced_config_map(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_a_persistent_error_is_retried_then_the_operation_fails(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Path
) -> None:
    plan = install_plan(
        api_client,
        catalog_namespace,
        tmp_path,
        f"needs-size-{namespace}",
        """
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ instance.metadata.name }}
data:
  size: {{ required(parameter("/size"), "parameter size") }}
""",
    )
    provision(api_client, namespace, "nosize", plan_id=plan)
    instance = wait_state(api_client, namespace, "sfserviceinstances", "nosize", "failed", timeout=40)
    # The session controller runs with --error-threshold 4.
    assert instance["status"]["errorCount"] == 4
    assert instance["status"]["error"].startswith("gave up after 4 consecutive errors: plan ")
    assert "required: parameter size is missing" in instance["status"]["error"]
    # The Event follows the status write that announces the outcome.
    wait_for(
        lambda: (
            {"RenderFailed", "GaveUp"}
            <= {e.reason for e in client.CoreV1Api(api_client).list_namespaced_event(namespace).items}
        ),
        10,
        "the RenderFailed and GaveUp events",
    )


def test_singleton_objects_are_shared_and_go_with_their_last_owner(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Path
) -> None:
    plan = install_plan(
        api_client,
        catalog_namespace,
        tmp_path,
        f"shared-{namespace}",
        """
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ instance.metadata.name }}-own
data: {a: "1"}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: shared-settings
  annotations:
    opbroker.io/singleton: "true"
data:
  first-owner: {{ instance.metadata.name }}
""",
    )
    provision(api_client, namespace, "s1", plan_id=plan)
    provision(api_client, namespace, "s2", plan_id=plan)
    first = wait_state(api_client, namespace, "sfserviceinstances", "s1", "succeeded")
    second = wait_state(api_client, namespace, "sfserviceinstances", "s2", "succeeded")
    shared = config_map(api_client, namespace, "shared-settings")
    owners = sorted(o.uid for o in shared.metadata.owner_references)
    assert owners == sorted([first["metadata"]["uid"], second["metadata"]["uid"]])
    creator = shared.data["first-owner"]
    assert creator in ("s1", "s2"), "created once, by whichever instance came first, then left alone"

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", "s1")
    wait_for(lambda: gone(api_client, namespace, "sfserviceinstances", "s1"), 30, "s1 to be deprovisioned")
    shared = config_map(api_client, namespace, "shared-settings")
    assert shared is not None and [o.uid for o in shared.metadata.owner_references] == [second["metadata"]["uid"]]
    assert shared.data["first-owner"] == creator
    assert config_map(api_client, namespace, "s1-own") is None

    custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", "s2")
    wait_for(
        lambda: config_map(api_client, namespace, "shared-settings") is None, 30, "the last owner to take it along"
    )


def test_objects_in_other_namespaces_are_cleaned_up_by_the_controller(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Path
) -> None:
    side = f"{namespace}-side"
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": side}})
    onboard(api_client, side)  # the plan writes there: its account is bound there
    try:
        plan = install_plan(
            api_client,
            catalog_namespace,
            tmp_path,
            f"elsewhere-{namespace}",
            f"""
apiVersion: v1
kind: ConfigMap
metadata:
  name: "{{{{ instance.metadata.name }}}}-remote"
  namespace: {side}
data: {{a: "1"}}
""",
            namespaces=(side,),
        )
        provision(api_client, namespace, "x1", plan_id=plan)
        wait_state(api_client, namespace, "sfserviceinstances", "x1", "succeeded")
        remote = config_map(api_client, side, "x1-remote")
        assert remote is not None and not remote.metadata.owner_references  # cannot be owned across namespaces
        custom(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", "x1")
        wait_for(lambda: gone(api_client, namespace, "sfserviceinstances", "x1"), 30, "x1 to be deprovisioned")
        assert config_map(api_client, side, "x1-remote") is None
    finally:
        client.CoreV1Api(api_client).delete_namespace(side)


def lease_holder(api: client.ApiClient, namespace: str) -> str | None:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease("opbroker-controller", namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    holder: str | None = lease.spec.holder_identity
    return holder


def metric(port: int, name: str, labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    match = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def test_two_replicas_are_active_passive_and_fail_over(
    api_client: client.ApiClient,
    namespace: str,
    catalog_namespace: str,
    control_plane: ControlPlane,
    controller: Process,
    tmp_path: Path,
) -> None:
    controller.stop()  # the session's controller runs without election; take it out of the picture
    ports = free_ports(2)
    replicas = [
        Process(
            f"replica-{i}",
            [
                *controller_command(control_plane),
                "--leader-election",
                "--lease-seconds",
                "4",
                "--metrics-port",
                str(port),
            ],
            tmp_path,
        )
        for i, port in enumerate(ports)
    ]
    try:
        for replica in replicas:
            replica.start()
        holder = wait_for(lambda: lease_holder(api_client, catalog_namespace), 30, "a leader to be elected")
        provision(api_client, namespace, "ha1")
        wait_state(api_client, namespace, "sfserviceinstances", "ha1", "succeeded")
        leaders = [r for r in replicas if "became the leader" in r.log.read_text()]
        assert len(leaders) == 1, "exactly one replica leads"
        leader = leaders[0]
        follower = next(r for r in replicas if r is not leader)
        leader_port = ports[replicas.index(leader)]
        assert metric(leader_port, "opbroker_reconcile_seconds_count", 'kind="instance"') >= 1
        assert metric(leader_port, "opbroker_objects", 'kind="instance",state="succeeded"') >= 1
        assert "became the leader" not in follower.log.read_text()

        leader.kill()
        wait_for(
            lambda: lease_holder(api_client, catalog_namespace) not in (None, holder), 30, "the follower to take over"
        )
        wait_for(lambda: "became the leader" in follower.log.read_text(), 10, "the follower to start reconciling")
        provision(api_client, namespace, "ha2")
        wait_state(api_client, namespace, "sfserviceinstances", "ha2", "succeeded")
    finally:
        for replica in replicas:
            replica.stop()
        controller.start()


def failed_with_error(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    def failed() -> dict[str, Any] | None:
        found = custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, "sfserviceinstances", name)
        status = found.get("status") or {}
        return found if status.get("state") == "failed" and status.get("error") else None

    found: dict[str, Any] = wait_for(failed, 30, f"instance {name} to fail with an error")
    return found


def test_an_object_the_api_server_refuses_fails_the_operation_with_its_message(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Path
) -> None:
    """A rendered object refused as invalid (422: a schema violation, an invalid name) ends the operation
    at once, with the API server's own explanation; values in it are masked (a rendered value may be a
    password), the object's own name is not; nothing is retried."""
    plan = install_plan(
        api_client,
        catalog_namespace,
        tmp_path,
        f"refused-{namespace}",
        """
apiVersion: demo.opbroker.io/v1alpha1
kind: Database
metadata:
  name: {{ instance.metadata.name }}
spec:
  engine: postgresql
  storageGB: {{ parameter("/storage", 1) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ instance.metadata.name }}-{{ parameter("/suffix", "ok") }}
  labels:
    token: {{ parameter("/label", "fine") }}
""",
    )
    provision(api_client, namespace, "schema", plan_id=plan, parameters={"storage": 0})
    provision(api_client, namespace, "badname", plan_id=plan, parameters={"suffix": "Not_A_Name"})
    provision(api_client, namespace, "leaky", plan_id=plan, parameters={"label": "s3cr3t value!"})
    # (The test's own in_queue write can land after the controller's first verdict and start it over.)
    schema, bad_name, leaky = (failed_with_error(api_client, namespace, n) for n in ("schema", "badname", "leaky"))

    error = schema["status"]["error"]
    assert error.startswith("the API server refused an object as invalid (422): fix the plan's template"), error
    assert f"the API server refused Database {namespace}/schema (422 Invalid): " in error, error
    assert "spec.storageGB" in error and "greater than or equal to 1" in error
    assert not schema["status"].get("errorCount"), "a permanent refusal is not retried"
    assert [c["reason"] for c in schema["status"]["conditions"] if c["type"] == "Ready"] == ["ApplyRefused"]
    error = bad_name["status"]["error"]
    assert f"the API server refused ConfigMap {namespace}/badname-Not_A_Name (422 Invalid)" in error, error
    assert "metadata.name" in error and "RFC 1123" in error
    error = leaky["status"]["error"]
    assert "metadata.labels" in error and 'Invalid value: "…"' in error, error

    def everything_said() -> list[str]:
        events = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
        return [str(i["status"]) for i in (schema, bad_name, leaky)] + [e.message or "" for e in events]

    wait_for(lambda: "ApplyRefused" in str(client.CoreV1Api(api_client).list_namespaced_event(namespace)), 10, "events")
    assert not [text for text in everything_said() if "s3cr3t" in text]


def _echoing_policy(api: client.ApiClient, namespace: str) -> str:
    """A ValidatingAdmissionPolicy, bound to ``namespace`` only, refusing a ConfigMap or Secret with a ``pin``
    and naming the pin in its message unquoted (a messageExpression says whatever its author wrote): a
    ConfigMap's as text, a Secret's as the base64 the API server holds. Returns its name once enforced."""
    name = f"echo-pin-{namespace}"
    admission = client.AdmissionregistrationV1Api(api)
    admission.create_validating_admission_policy(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["secrets", "configmaps"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.data) || !('pin' in object.data)",
                        "messageExpression": "'pin ' + string(object.data['pin']) + ' is on the deny list'",
                    }
                ],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            },
        }
    )
    probe = {"metadata": {"name": "probe"}, "stringData": {"pin": "probe-value"}}

    def enforced() -> bool:
        try:
            client.CoreV1Api(api).create_namespaced_secret(namespace, probe, dry_run="All")
        except ApiException as exc:
            return exc.status == 422 and "is on the deny list" in str(exc.body)
        return False

    wait_for(enforced, 30, "the admission policy to be enforced")
    return name


def test_a_value_the_api_server_echoes_unquoted_never_leaves_the_controller(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Path, controller: Process
) -> None:
    """An admission policy refuses a rendered ConfigMap and a rendered Secret, and its message echoes their value
    unquoted (the API server's own text: ``... denied request: pin s3cr3t-8675309 is on the deny list``, and for
    the Secret the value's base64). Each operation fails with that explanation (ApplyRefused), the value
    masked in the status, the events and the controller's log."""
    pins = {"ConfigMap": "s3cr3t-8675309", "Secret": "0th3r-s3cr3t-42"}
    encoded = base64.b64encode(pins["Secret"].encode()).decode()
    policy = _echoing_policy(api_client, namespace)
    try:
        plan = install_plan(
            api_client,
            catalog_namespace,
            tmp_path,
            f"unquoted-{namespace}",
            """
apiVersion: v1
kind: {{ parameter("/kind") }}
metadata:
  name: {{ instance.metadata.name }}-creds
{% if parameter("/kind") == "Secret" %}stringData{% else %}data{% endif %}:
  pin: "{{ parameter("/pin") }}"
""",
        )
        for kind, pin in pins.items():
            provision(api_client, namespace, kind.lower(), plan_id=plan, parameters={"kind": kind, "pin": pin})
        failed = {kind: failed_with_error(api_client, namespace, kind.lower()) for kind in pins}
    finally:
        admission = client.AdmissionregistrationV1Api(api_client)
        admission.delete_validating_admission_policy_binding(policy)
        admission.delete_validating_admission_policy(policy)
    for kind, instance in failed.items():
        error = instance["status"]["error"]
        where = f"{namespace}/{kind.lower()}-creds"
        assert error.startswith(f'the cluster\'s ValidatingAdmissionPolicy "{policy}" refused a write'), error
        assert f"the API server refused {kind} {where} (422 Invalid): " in error, error
        assert "denied request: pin … is on the deny list" in error, error
    wait_for(lambda: "ApplyRefused" in str(client.CoreV1Api(api_client).list_namespaced_event(namespace)), 10, "events")
    events = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
    said = [*(str(i["status"]) for i in failed.values()), *(e.message or "" for e in events)]
    said.append(controller.log.read_text())
    for secret in (*pins.values(), encoded.rstrip("=")):
        assert not [text for text in said if secret in text], secret


def test_a_refusal_that_can_be_fixed_elsewhere_is_retried_and_counted(
    api_client: client.ApiClient, namespace: str, catalog_namespace: str, tmp_path: Path
) -> None:
    """An object for a namespace that does not exist may work once it does (and once the platform onboards it:
    the plan account is bound per namespace, so the API server answers 403 naming the account before it would say
    404): counted retries."""
    plan = install_plan(
        api_client,
        catalog_namespace,
        tmp_path,
        f"elsewhere-{namespace}",
        """
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ instance.metadata.name }}
  namespace: {{ parameter("/target") }}
""",
        namespaces=(f"{namespace}-nowhere",),
    )
    provision(api_client, namespace, "away", plan_id=plan, parameters={"target": f"{namespace}-nowhere"})
    instance = wait_state(api_client, namespace, "sfserviceinstances", "away", "failed", timeout=40)
    assert instance["status"]["errorCount"] == 4  # the session controller runs with --error-threshold 4
    assert instance["status"]["error"].startswith("gave up after 4 consecutive errors: the account ")
    assert f'or onboard namespace "{namespace}-nowhere"' in instance["status"]["error"]  # the fix, then what was said
    assert "the API server refused ConfigMap" in instance["status"]["error"]
    assert "(403 Forbidden)" in instance["status"]["error"] and "opbroker-plans" in instance["status"]["error"]
