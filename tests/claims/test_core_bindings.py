"""servicebinding.io binding Secrets and workload projection, built without a server.

Aspects: endpoint values from literals and Secrets (missing Secret, missing key), the binding's keys
(``type``, ``provider``, the requested keys, reserved names), the Secret type and owner, the content
hash; label selectors (matchLabels AND matchExpressions with all four operators); selection by name or
selector; the projection patch (volume, mounts, env, SERVICE_BINDING_ROOT kept or set, init
containers, hash annotation) and its withdrawal.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from opbroker.api.primaza import (
    ApplicationSelector,
    LabelSelector,
    LabelSelectorRequirement,
    ServiceEndpointDefinitionItem,
)
from opbroker.controller.claims import servicebinding, workloads
from opbroker.controller.claims.core import names
from opbroker.controller.claims.core.views import OwnerRef, WorkloadView

DEFINITION = [
    ServiceEndpointDefinitionItem.model_validate({"name": "host", "value": "db.example"}),
    ServiceEndpointDefinitionItem.model_validate({"name": "port", "value": "5432"}),
    ServiceEndpointDefinitionItem.model_validate(
        {"name": "password", "valueFromSecret": {"name": "creds", "key": "password"}}
    ),
    ServiceEndpointDefinitionItem.model_validate({"name": "user", "valueFromSecret": {"name": "creds", "key": "user"}}),
]


def test_values_resolve_from_literals_and_secrets() -> None:
    assert servicebinding.referenced_secrets(DEFINITION) == {"creds"}
    found = servicebinding.resolve(DEFINITION, {"creds": {"password": "s3cret", "user": "app"}})
    assert found.complete
    assert found.values == {"host": "db.example", "port": "5432", "password": "s3cret", "user": "app"}


@pytest.mark.parametrize(
    ("secrets", "missing"),
    [
        (
            {"creds": None},
            ["Secret 'creds' (endpoint 'password') not found", "Secret 'creds' (endpoint 'user') not found"],
        ),
        ({"creds": {"user": "app"}}, ["key 'password' of Secret 'creds' (endpoint 'password') not found"]),
        ({}, ["Secret 'creds' (endpoint 'password') not found", "Secret 'creds' (endpoint 'user') not found"]),
    ],
)
def test_unresolvable_values_are_named(secrets: dict[str, Any], missing: list[str]) -> None:
    found = servicebinding.resolve(DEFINITION, secrets)
    assert not found.complete and list(found.missing) == missing
    assert "s3cret" not in " ".join(found.missing)


def test_decode_reads_a_secret_as_text() -> None:
    secret = {"data": {"a": base64.b64encode(b"x").decode(), "bad": "!!!"}}
    assert servicebinding.decode(secret) == {"a": "x"}
    assert servicebinding.decode(None) is None


@pytest.mark.parametrize(
    ("provider", "keys", "expected"),
    [
        ("aws", ["host", "password"], {"type": "postgresql", "provider": "aws", "host": "h", "password": "p"}),
        (None, ["host"], {"type": "postgresql", "host": "h"}),
        ("aws", ["host", "type"], {"type": "postgresql", "provider": "aws", "host": "h"}),  # reserved wins
        ("aws", ["absent"], {"type": "postgresql", "provider": "aws"}),
    ],
)
def test_binding_data(provider: str | None, keys: list[str], expected: dict[str, str]) -> None:
    values = {"host": "h", "password": "p", "type": "custom"}
    assert (
        servicebinding.binding_data(service_type="postgresql", provider=provider, values=values, keys=keys) == expected
    )


def test_the_binding_secret_is_servicebinding_io_compliant_and_owned_by_the_claim() -> None:
    claim = {
        "apiVersion": "primaza.io/v1alpha1",
        "kind": "ServiceClaim",
        "metadata": {"name": "orders-db", "namespace": "shop", "uid": "u-1"},
    }
    data = {"type": "postgresql", "provider": "aws", "host": "h"}
    secret = servicebinding.claim_binding_secret(OwnerRef.of(claim), data, "postgresql")
    assert secret["type"] == "servicebinding.io/postgresql"
    assert secret["metadata"]["name"] == "orders-db-binding"
    assert secret["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "primaza.io/v1alpha1",
            "kind": "ServiceClaim",
            "name": "orders-db",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert servicebinding.decode(secret) == data
    assert secret["metadata"]["labels"][names.LABEL_CLAIM] == "orders-db"


def test_the_content_hash_changes_with_the_content_only() -> None:
    first = servicebinding.content_hash({"a": "1", "b": "2"})
    assert first == servicebinding.content_hash({"b": "2", "a": "1"})
    assert first != servicebinding.content_hash({"a": "1", "b": "3"})


def expression(key: str, operator: str, values: list[str] | None = None) -> LabelSelectorRequirement:
    return LabelSelectorRequirement.model_validate({"key": key, "operator": operator, "values": values})


LABELS = {"app": "orders", "tier": "web", "env": "dev"}
# (reason, selector, matches LABELS)
SELECTORS = [
    ("empty selector selects everything", LabelSelector(), True),
    ("matchLabels equal", LabelSelector(match_labels={"app": "orders"}), True),
    ("matchLabels all must hold", LabelSelector(match_labels={"app": "orders", "tier": "db"}), False),
    ("In", LabelSelector(match_expressions=[expression("env", "In", ["dev", "qa"])]), True),
    ("In, value not listed", LabelSelector(match_expressions=[expression("env", "In", ["prod"])]), False),
    ("In, label absent", LabelSelector(match_expressions=[expression("team", "In", ["a"])]), False),
    ("NotIn", LabelSelector(match_expressions=[expression("env", "NotIn", ["prod"])]), True),
    ("NotIn, value listed", LabelSelector(match_expressions=[expression("env", "NotIn", ["dev"])]), False),
    (
        "NotIn holds when the label is absent",
        LabelSelector(match_expressions=[expression("team", "NotIn", ["a"])]),
        True,
    ),
    ("Exists", LabelSelector(match_expressions=[expression("tier", "Exists")]), True),
    ("Exists, absent", LabelSelector(match_expressions=[expression("team", "Exists")]), False),
    ("DoesNotExist", LabelSelector(match_expressions=[expression("team", "DoesNotExist")]), True),
    ("DoesNotExist, present", LabelSelector(match_expressions=[expression("app", "DoesNotExist")]), False),
    (
        "matchLabels AND expressions: both hold",
        LabelSelector(match_labels={"app": "orders"}, match_expressions=[expression("env", "In", ["dev"])]),
        True,
    ),
    (
        "matchLabels AND expressions: one expression fails",
        LabelSelector(
            match_labels={"app": "orders"},
            match_expressions=[expression("env", "In", ["dev"]), expression("tier", "DoesNotExist")],
        ),
        False,
    ),
]


@pytest.mark.parametrize(("reason", "selector", "expected"), SELECTORS, ids=[s[0] for s in SELECTORS])
def test_label_selectors(reason: str, selector: LabelSelector, expected: bool) -> None:
    assert workloads.selector_matches(selector, LABELS) == expected, reason


def deployment(name: str = "web", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    pod_spec = {"containers": [{"name": "app", "image": "nginx"}], **spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop", "labels": labels or {"app": "orders"}},
        "spec": {"template": {"spec": pod_spec}},
    }


@pytest.mark.parametrize(
    ("application", "workload", "expected"),
    [
        (ApplicationSelector(name="web"), deployment("web"), True),
        (ApplicationSelector(name="web"), deployment("api"), False),
        (ApplicationSelector(selector=LabelSelector(match_labels={"app": "orders"})), deployment("x"), True),
        (ApplicationSelector(selector=LabelSelector(match_labels={"app": "cart"})), deployment("x"), False),
        (ApplicationSelector(kind="StatefulSet", name="web"), deployment("web"), False),
        (
            ApplicationSelector(name="web"),
            {**deployment("web"), "metadata": {**deployment()["metadata"], "deletionTimestamp": "now"}},
            False,
        ),
    ],
)
def test_selected(application: ApplicationSelector, workload: dict[str, Any], expected: bool) -> None:
    assert workloads.selected(application, WorkloadView.of(workload)) == expected


def test_only_workload_kinds_with_a_pod_template_are_supported() -> None:
    assert workloads.supported(ApplicationSelector(name="x"))
    assert workloads.supported(ApplicationSelector(kind="StatefulSet", name="x"))
    assert not workloads.supported(ApplicationSelector(api_version="v1", kind="Pod", name="x"))


def test_the_projection_mounts_the_secret_sets_the_root_and_env_and_the_hash() -> None:
    patch = workloads.projection(
        WorkloadView.of(deployment()),
        claim="orders-db",
        secret_name="orders-db-binding",
        keys=["type", "host"],
        content_hash="abc",
    )
    template = patch["spec"]["template"]
    assert patch["metadata"] == {"name": "web", "namespace": "shop"}
    assert template["metadata"]["annotations"] == {"binding.claims.opbroker.io/orders-db": "abc"}
    assert template["spec"]["volumes"] == [{"name": "binding-orders-db", "secret": {"secretName": "orders-db-binding"}}]
    (container,) = template["spec"]["containers"]
    assert container["name"] == "app" and "image" not in container  # a partial object: only our fields
    assert container["volumeMounts"] == [
        {"name": "binding-orders-db", "mountPath": "/bindings/orders-db", "readOnly": True}
    ]
    assert container["env"] == [
        {"name": "SERVICE_BINDING_ROOT", "value": "/bindings"},
        {"name": "ORDERS_DB_HOST", "valueFrom": {"secretKeyRef": {"name": "orders-db-binding", "key": "host"}}},
        {"name": "ORDERS_DB_TYPE", "valueFrom": {"secretKeyRef": {"name": "orders-db-binding", "key": "type"}}},
    ]


def test_the_projection_keeps_a_root_the_container_sets_and_covers_init_containers() -> None:
    workload = deployment(
        initContainers=[
            {"name": "migrate", "image": "m", "env": [{"name": "SERVICE_BINDING_ROOT", "value": "/srv/b/"}]}
        ]
    )
    workload["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "SERVICE_BINDING_ROOT", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}
    ]
    spec = workloads.projection(
        WorkloadView.of(workload), claim="c1", secret_name="s", keys=["host"], content_hash="h"
    )["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    assert init["volumeMounts"][0]["mountPath"] == "/srv/b/c1"
    assert init["env"][0] == {"name": "SERVICE_BINDING_ROOT", "value": "/srv/b"}
    (app,) = spec["containers"]
    assert app["volumeMounts"][0]["mountPath"] == "/bindings/c1"
    assert all(e["name"] != "SERVICE_BINDING_ROOT" for e in app["env"])  # set from elsewhere: left alone


def test_a_custom_default_root() -> None:
    patch = workloads.projection(
        WorkloadView.of(deployment()),
        claim="c",
        secret_name="s",
        keys=[],
        content_hash="h",
        default_root="/var/bindings",
    )
    container = patch["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": "SERVICE_BINDING_ROOT", "value": "/var/bindings"}]
    assert container["volumeMounts"][0]["mountPath"] == "/var/bindings/c"


def test_withdrawal_and_field_managers() -> None:
    assert workloads.unprojection(WorkloadView.of(deployment())) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
    }
    managed = {
        **deployment(),
        "metadata": {**deployment()["metadata"], "managedFields": [{"manager": "opbroker-claim-c1"}]},
    }
    assert workloads.managed_by(WorkloadView.of(managed), names.field_manager("c1"))
    assert not workloads.managed_by(WorkloadView.of(managed), names.field_manager("c2"))


@pytest.mark.parametrize(
    ("claim", "key", "env"),
    [("orders-db", "password", "ORDERS_DB_PASSWORD"), ("1st.db", "user-name", "_1ST_DB_USER_NAME")],
)
def test_env_names(claim: str, key: str, env: str) -> None:
    assert workloads.env_name(claim, key) == env


def test_long_names_stay_within_kubernetes_limits() -> None:
    claim = "c" * 200
    assert len(workloads.volume_name(claim)) <= 63
    assert len(workloads.hash_annotation(claim).split("/")[1]) <= 63
    assert len(names.field_manager(claim)) <= 128
    assert names.bounded(claim) != names.bounded("c" * 199 + "d")
