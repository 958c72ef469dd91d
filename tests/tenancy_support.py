"""Acting as a tenant: a real ServiceAccount token holding only one namespace's rights, never the admin's.

A consumer of a shared cluster normally may create and read the opbroker kinds and Secrets in its own
namespace, and nothing else. :func:`make_tenant` creates exactly that (a ServiceAccount, a Role, a RoleBinding)
and logs in with a token from the TokenRequest API, so every request of a tenancy test is authorised by the real
API server as that tenant. :func:`snapshot` records what a victim namespace holds, so a test can prove that
nothing of it changed.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

#: Every API group of opbroker's kinds: a tenant may create, read and change them in its own namespace (status
#: included: a tenant with ``patch`` on its objects' status is what the trust model must survive).
OPBROKER_GROUPS = ("osb.servicefabrik.io", "resource.servicefabrik.io", "primaza.io", "servicecatalog.k8s.io")
TENANT_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")


def tenant_rules() -> list[dict[str, Any]]:
    """The Role a tenant holds in its own namespace: the opbroker kinds (every subresource), Secrets and
    ConfigMaps; reading Events."""
    return [
        {"apiGroups": list(OPBROKER_GROUPS), "resources": ["*"], "verbs": list(TENANT_VERBS)},
        {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": list(TENANT_VERBS)},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    ]


@dataclass(frozen=True)
class Tenant:
    """A tenant of one namespace, logged in with its own ServiceAccount token."""

    namespace: str
    service_account: str
    api: client.ApiClient

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)


def service_account_client(
    admin: client.ApiClient, namespace: str, name: str, *, seconds: int = 3600
) -> client.ApiClient:
    """An API client logged in as ServiceAccount ``namespace/name`` (a token from the TokenRequest API)."""
    core = client.CoreV1Api(admin)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}}
    answer = core.create_namespaced_service_account_token(name, namespace, request)
    configuration = client.Configuration()
    configuration.host = admin.configuration.host
    configuration.ssl_ca_cert = admin.configuration.ssl_ca_cert
    configuration.verify_ssl = admin.configuration.verify_ssl
    configuration.api_key = {"authorization": answer.status.token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(configuration)


def await_enforced(dry_run: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait until the API server enforces a policy just installed: ``dry_run`` (a dry-run write the policy refuses)
    is refused with 403. The API server takes a new ValidatingAdmissionPolicy up through an informer, within a
    second or so; a write sent before that passes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            dry_run()
        except ApiException as exc:
            if exc.status == 403:
                return
            raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"the admission policy was not enforced within {timeout:.0f}s")
        time.sleep(0.1)


def ensure_service_account(admin: client.ApiClient, namespace: str, name: str) -> None:
    try:
        client.CoreV1Api(admin).create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise


def grant(
    admin: client.ApiClient,
    namespace: str,
    name: str,
    rules: list[dict[str, Any]],
    subject: dict[str, str],
) -> None:
    """A Role ``name`` with ``rules`` in ``namespace``, bound to ``subject``."""
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject],
        },
    )


def make_tenant(admin: client.ApiClient, namespace: str, name: str = "tenant") -> Tenant:
    """A ServiceAccount in ``namespace`` with only :func:`tenant_rules` there, logged in with its own token."""
    ensure_service_account(admin, namespace, name)
    grant(
        admin,
        namespace,
        f"{name}-rights",
        tenant_rules(),
        {"kind": "ServiceAccount", "name": name, "namespace": namespace},
    )
    return Tenant(namespace, name, service_account_client(admin, namespace, name))


@pytest.fixture
def tenant(api_client: client.ApiClient, namespace: str) -> Iterator[Tenant]:
    """The test namespace's tenant: an attacker (or a victim) with only its namespace's consumer rights."""
    acting = make_tenant(api_client, namespace)
    yield acting
    acting.api.close()


#: What :func:`snapshot` records of a namespace: core kinds and every opbroker kind a tenant may own.
SNAPSHOT_CORE = ("secrets", "configmaps")
SNAPSHOT_CUSTOM = (
    ("osb.servicefabrik.io", "v1alpha1", "sfserviceinstances"),
    ("osb.servicefabrik.io", "v1alpha1", "sfservicebindings"),
    ("osb.servicefabrik.io", "v1alpha1", "sfplans"),
    ("osb.servicefabrik.io", "v1alpha1", "sfservices"),
    ("servicecatalog.k8s.io", "v1alpha1", "instances"),
    ("servicecatalog.k8s.io", "v1alpha1", "bindings"),
    ("primaza.io", "v1alpha1", "registeredservices"),
    ("primaza.io", "v1alpha1", "serviceclaims"),
)


def _essence(obj: dict[str, Any]) -> dict[str, Any]:
    """What a victim would miss if it changed: everything but the bookkeeping the server alone moves."""
    kept = copy.deepcopy(obj)
    meta = kept.get("metadata") or {}
    for field in ("managedFields", "resourceVersion"):
        meta.pop(field, None)
    return kept


def snapshot(admin: client.ApiClient, namespace: str, *extra: tuple[str, str, str]) -> dict[str, dict[str, Any]]:
    """Every Secret, ConfigMap and opbroker object of ``namespace`` (and ``extra`` custom kinds), by
    ``plural/name``, as the admin reads them (with their resourceVersion kept aside under ``version``)."""
    core = client.CoreV1Api(admin)
    custom = client.CustomObjectsApi(admin)
    taken: dict[str, dict[str, Any]] = {}
    for secret in core.list_namespaced_secret(namespace).items:
        body = admin.sanitize_for_serialization(secret)
        taken[f"secrets/{secret.metadata.name}"] = body
    for config_map in core.list_namespaced_config_map(namespace).items:
        if config_map.metadata.name == "kube-root-ca.crt":
            continue
        taken[f"configmaps/{config_map.metadata.name}"] = admin.sanitize_for_serialization(config_map)
    for group, version, plural in (*SNAPSHOT_CUSTOM, *extra):
        try:
            listed = custom.list_namespaced_custom_object(group, version, namespace, plural)
        except ApiException as exc:
            if exc.status == 404:  # a kind this API server does not serve
                continue
            raise
        for item in listed.get("items", []):
            taken[f"{plural}/{item['metadata']['name']}"] = item
    return {
        key: {"version": (value.get("metadata") or {}).get("resourceVersion"), "body": _essence(value)}
        for key, value in taken.items()
    }


def assert_unchanged(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> None:
    """Nothing of the victim appeared, went or changed (resourceVersion included)."""
    assert sorted(after) == sorted(before), f"objects appeared or went: {sorted(set(after) ^ set(before))}"
    for key, was in before.items():
        now = after[key]
        assert now["body"] == was["body"], f"{key} changed"
        assert now["version"] == was["version"], (
            f"{key} was written (resourceVersion {was['version']} → {now['version']})"
        )


def refused(call: Any, *statuses: int) -> ApiException:
    """Run ``call`` and return the API server's refusal (the test fails if it is accepted)."""
    try:
        call()
    except ApiException as exc:
        assert exc.status in (statuses or (403,)), f"refused with {exc.status}, not {statuses or (403,)}: {exc.reason}"
        return exc
    raise AssertionError("the API server accepted what the tenant may not do")


def await_facts_enforced(admin: client.ApiClient) -> None:
    """Wait until the API server enforces the facts policy (``opbroker.api.admission``) just installed: a probe
    ServiceAccount allowed to create SFServiceInstances in ``default`` is refused one carrying opbroker's label."""
    namespace, name = "default", "opbroker-admission-probe"
    ensure_service_account(admin, namespace, name)
    rules = [{"apiGroups": ["osb.servicefabrik.io"], "resources": ["sfserviceinstances"], "verbs": ["create"]}]
    try:
        grant(admin, namespace, name, rules, {"kind": "ServiceAccount", "name": name, "namespace": namespace})
    except ApiException as exc:
        if exc.status != 409:
            raise
    probe = service_account_client(admin, namespace, name, seconds=600)
    body = {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceInstance",
        "metadata": {"name": "probe", "labels": {"opbroker.io/recorded-by": "broker"}},
        "spec": {"serviceId": "s", "planId": "p", "organizationGuid": "o", "spaceGuid": "s"},
    }
    custom = client.CustomObjectsApi(probe)
    try:
        await_enforced(
            lambda: custom.create_namespaced_custom_object(
                "osb.servicefabrik.io", "v1alpha1", namespace, "sfserviceinstances", body, dry_run="All"
            )
        )
    finally:
        probe.close()


def allowed(
    api: client.ApiClient, user: str, verb: str, group: str, resource: str, namespace: str, name: str = ""
) -> bool:
    """The API server's answer for ``user`` (with the groups a ServiceAccount has)."""
    account_namespace = user.split(":")[2]
    review = {
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{account_namespace}", "system:authenticated"],
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": resource,
                "namespace": namespace,
                **({"name": name} if name else {}),
            },
        }
    }
    answer = client.AuthorizationV1Api(api).create_subject_access_review(review)
    return bool(answer.status.allowed)
