"""Every refusal names what to do (issue 47): each kind of refusal the API server gives, as the controller shows it
(the object's Ready message and Event: ``shown_for``; the log and status: the refusal's description), names the
resource, its API group (where it has one) and the fix — and never a value of the refused object.

Two halves: the pure model (``core.refusals``: :func:`denial_of`, :func:`request_words`, the masking) on the API
server's own wordings; and the same through the controller's one door (``Kube``) against a real kube-apiserver, each
refusal made to happen for real — RBAC for a core-group and a named-group resource and at the cluster scope, a
namespace nobody onboarded, a namespace being deleted, a kind not installed, 422 from a schema, a
ValidatingAdmissionPolicy's denial, a 400.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import DEFAULT_NAMESPACE, DEFAULT_PLAN_SERVICE_ACCOUNT
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.refusals import MASK, Denial, denial_of, refusal, request_words, terminating_namespace
from opbroker.controller.core.shown_failures import explain, refused_trouble
from opbroker.controller.core.views import ApiStatus
from opbroker.controller.runtime.kube import Kube, KubeError
from opbroker.controller.runtime.troubles import shown_for
from tests.controller_support import wait_for

SECRET = "Sup3r-s3cret-v4lue-47aa"
"""Put into every refused object: it must appear in no message."""
PLAN_ACCOUNT = "system:serviceaccount:opbroker:opbroker-plan"


# -- the pure model, on the API server's own wordings --------------------------------------------------------------


def test_an_authorizers_denial_is_read_whole() -> None:
    message = (
        f'deployments.apps "web" is forbidden: User "{PLAN_ACCOUNT}" cannot patch resource "deployments" in API '
        'group "apps" in the namespace "team-a": RBAC: clusterrole.rbac.authorization.k8s.io "x" not found'
    )
    assert denial_of(message) == Denial(PLAN_ACCOUNT, "patch", "deployments", "apps", "team-a")
    cluster = (
        'User "alice" cannot create resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster '
        "scope"
    )
    assert denial_of(cluster) == Denial("alice", "create", "clusterroles", "rbac.authorization.k8s.io", None)
    sub = 'pods "p" is forbidden: User "bob" cannot create resource "pods/exec" in API group "" in the namespace "n"'
    found = denial_of(sub)
    assert found is not None and found.resource == "pods/exec" and found.group == ""
    assert found.rule == '{apiGroups: [""], resources: ["pods/exec"], verbs: ["create"]}'
    assert found.right == 'create pods/exec (API group "", the core group)'


@pytest.mark.parametrize(
    "message",
    [
        # an admission webhook or a policy says whatever it was written to say: a denial inside its words is not
        # the API server's (its parts could be values of the object)
        f'admission webhook "w.example.com" denied the request: User "x" cannot get resource "{SECRET.lower()}" '
        'in API group "" at the cluster scope',
        "configmaps \"c\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: User \"x\" "
        f'cannot get resource "{SECRET.lower()}" in API group "" at the cluster scope',
        "the server could not find the requested resource",
    ],
)
def test_a_denial_quoted_inside_someone_elses_words_is_not_read(message: str) -> None:
    assert denial_of(message) is None
    assert SECRET.lower() not in request_words(ApiStatus(message=message, reason=None))


def test_the_status_details_name_the_resource_unless_they_are_a_value_of_the_object() -> None:
    said = ApiStatus(message="m", reason="Invalid", resource="widgets", group="demo.opbroker.io")
    assert request_words(said) == ("widgets", "demo.opbroker.io")
    assert request_words(said, values=frozenset({"widgets"})) == ("demo.opbroker.io",)
    assert request_words(ApiStatus(message="m", reason=None, resource='a "quoted" thing', group=None)) == ()


def test_a_namespace_being_deleted_is_read_from_the_api_servers_own_words_only() -> None:
    said = 'configmaps "c" is forbidden: unable to create new content in namespace t-1 because it is being terminated'
    assert terminating_namespace(said) == "t-1"
    assert terminating_namespace('admission webhook "w" denied the request: ' + said) is None


MANIFEST = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "team-a"},
    "spec": {"template": {"metadata": {"annotations": {"password": SECRET, "tier": "apps"}}}},
}


@dataclass(frozen=True)
class Case:
    """A refusal as the API server words it, and what its shown message must name."""

    id: str
    status: int
    body: dict[str, Any]
    reason: Reason
    names: tuple[str, ...]


CASES = (
    Case(
        "403-core-group",
        403,
        {
            "reason": "Forbidden",
            "message": f'configmaps "web" is forbidden: User "{PLAN_ACCOUNT}" cannot patch resource "configmaps" in '
            'API group "" in the namespace "team-a"',
            "details": {"name": "web", "kind": "configmaps"},
        },
        Reason.ACCOUNT_LACKS_RIGHT,
        (
            'patch configmaps (API group "", the core group)',
            '{apiGroups: [""], resources: ["configmaps"], verbs: ["patch"]}',
            "opbroker namespace onboard team-a --control-plane opbroker",
        ),
    ),
    Case(
        "403-named-group",
        403,
        {
            "reason": "Forbidden",
            "message": f'deployments.apps "web" is forbidden: User "{PLAN_ACCOUNT}" cannot patch resource '
            '"deployments" in API group "apps" in the namespace "team-a"',
            "details": {"name": "web", "group": "apps", "kind": "deployments"},
        },
        Reason.ACCOUNT_LACKS_RIGHT,
        ('patch deployments (API group "apps")', '{apiGroups: ["apps"], resources: ["deployments"], verbs: ["patch"]}'),
    ),
    Case(
        "403-not-onboarded",
        403,
        {
            "reason": "Forbidden",
            "message": 'deployments.apps "web" is forbidden: User "system:serviceaccount:team-a:opbroker" cannot '
            'patch resource "deployments" in API group "apps" in the namespace "team-a"',
        },
        Reason.NAMESPACE_NOT_ONBOARDED,
        ('patch deployments (API group "apps")', "opbroker namespace onboard team-a"),
    ),
    Case(
        "403-terminating",
        403,
        {
            "reason": "Forbidden",
            "message": 'deployments.apps "web" is forbidden: unable to create new content in namespace team-a '
            "because it is being terminated",
        },
        Reason.NAMESPACE_TERMINATING,
        ('namespace "team-a" is being deleted', "deployments.apps", "create it again"),
    ),
    Case(
        "404-kind",
        404,
        {"reason": "NotFound", "message": "the server could not find the requested resource"},
        Reason.KIND_NOT_INSTALLED,
        ("Deployment (apps/v1)", "install the operator"),
    ),
    Case(
        "422-schema",
        422,
        {
            "reason": "Invalid",
            "message": f'Deployment.apps "web" is invalid: spec.template.metadata.annotations: Invalid value: '
            f'"{SECRET}": must be no more than 63 characters, spec.replicas: Invalid value: -1: must be >= 0',
        },
        Reason.OBJECT_INVALID,
        ("Deployment.apps", "spec.replicas", "schema of Deployment (apps/v1)", "fix the plan's template"),
    ),
    Case(
        "webhook",
        400,
        {
            "reason": "BadRequest",
            "message": f'admission webhook "deny.example.com" denied the request: password {SECRET} "is weak"',
        },
        Reason.ADMISSION_DENIED,
        ('admission webhook "deny.example.com"', "of Deployment (apps/v1)", "ask the cluster's administrator"),
    ),
    Case(
        "policy",
        422,
        {
            "reason": "Invalid",
            "message": "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'no-pw' with binding "
            f"'no-pw-b' denied request: holds {SECRET}",
        },
        Reason.ADMISSION_DENIED,
        ('ValidatingAdmissionPolicy "no-pw"', "of Deployment (apps/v1)", "ask the cluster's administrator"),
    ),
    Case(
        "400",
        400,
        {
            "reason": "BadRequest",
            "message": "the namespace of the provided object does not match the namespace sent on the request",
        },
        Reason.OBJECT_INVALID,
        ("Deployment team-a/web", "schema of Deployment (apps/v1)", "fix the plan's template"),
    ),
)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_refusal_names_its_resource_group_and_fix(case: Case) -> None:
    found = refusal(case.status, case.body, MANIFEST)
    shown = explain(refused_trouble(found))
    assert shown.reason is case.reason, shown
    for words in case.names:
        assert words in shown.message, (words, shown.message)
    for text in (shown.message, found.describe()):
        assert SECRET not in text, text
    if case.status == 403:  # the denial's resource, group, account and namespace are whole
        assert f'"{MASK}"' not in found.describe(), found.describe()


def test_a_plain_404_is_a_kind_not_served() -> None:
    """A path the API server does not serve is answered by its mux in plain text, no Status: a kind whose CRD went
    away since discovery said it was served."""
    found = refusal(404, "404 page not found", MANIFEST)
    shown = explain(refused_trouble(found))
    assert shown.reason is Reason.KIND_NOT_INSTALLED and "Deployment (apps/v1)" in shown.message, shown
    missing = refusal(404, {"reason": "NotFound", "message": 'namespaces "team-a" not found'}, MANIFEST)
    assert explain(refused_trouble(missing)).reason is Reason.RECONCILE_FAILED  # a Status: something else is missing


def test_a_value_of_the_object_that_is_also_the_group_is_still_named_by_the_denial() -> None:
    """``apps`` is a value of the object (an annotation) and the denial's group: the denial is the API server's own
    account of the request, so it stays; another value is masked wherever it is."""
    body = {
        "reason": "Forbidden",
        "message": f'deployments.apps "web" is forbidden: User "{PLAN_ACCOUNT}" cannot patch resource "deployments" '
        'in API group "apps" in the namespace "team-a"',
    }
    said = refusal(403, {**body, "message": body["message"] + f": {SECRET}"}, MANIFEST).message
    assert 'deployments.apps "web"' in said and 'in API group "apps"' in said and SECRET not in said


# -- the same refusals for real: through the controller's door, against a kube-apiserver ---------------------------


@dataclass(frozen=True)
class Real:
    """A refusal made to happen: how, and what its shown message must name."""

    id: str
    make: Callable[[Kube, str], None]
    """Makes the door meet the refusal, given the door and a fresh namespace."""
    reason: Reason
    names: Callable[[str], tuple[str, ...]]


def _config_map(namespace: str, name: str = "cm") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"password": SECRET},
    }


def _deployment(namespace: str, replicas: int = 1) -> dict[str, Any]:
    labels = {"app": "web"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace, "annotations": {"password": SECRET}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "x", "env": [{"name": "PW", "value": SECRET}]}]},
            },
        },
    }


REAL_PLAN_ACCOUNT = f"system:serviceaccount:{DEFAULT_NAMESPACE}:{DEFAULT_PLAN_SERVICE_ACCOUNT}"


def _as_plan_account(kube: Kube, manifest: dict[str, Any]) -> None:
    """Written as the control plane's plan account would write it, into a namespace nobody onboarded."""
    kube.acting_as(REAL_PLAN_ACCOUNT).apply(manifest)


REAL = (
    Real(
        "403-core-group",
        lambda kube, ns: _as_plan_account(kube, _config_map(ns)),
        Reason.ACCOUNT_LACKS_RIGHT,
        lambda ns: ('patch configmaps (API group "", the core group)', f"opbroker namespace onboard {ns}"),
    ),
    Real(
        "403-named-group",
        lambda kube, ns: _as_plan_account(kube, _deployment(ns)),
        Reason.ACCOUNT_LACKS_RIGHT,
        lambda ns: (
            'patch deployments (API group "apps")',
            '{apiGroups: ["apps"], resources: ["deployments"], verbs: ["patch"]}',
        ),
    ),
    Real(
        "403-cluster-scope",
        lambda kube, ns: _as_plan_account(
            kube,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": f"{ns}-role", "annotations": {"password": SECRET}},
                "rules": [],
            },
        ),
        Reason.ACCOUNT_LACKS_RIGHT,
        lambda ns: (
            'patch clusterroles (API group "rbac.authorization.k8s.io") at the cluster scope',
            "in a ClusterRole bound to it",
        ),
    ),
    Real(
        "403-not-onboarded",
        lambda kube, ns: kube.acting_as(f"system:serviceaccount:{ns}:opbroker").apply(_config_map(ns)),
        Reason.NAMESPACE_NOT_ONBOARDED,
        lambda ns: (f'namespace "{ns}" is not onboarded', "patch configmaps", f"opbroker namespace onboard {ns}"),
    ),
    Real(
        "404-kind",
        lambda kube, ns: kube.apply(
            {"apiVersion": "gadgets.example.com/v1", "kind": "Gadget", "metadata": {"name": "g", "namespace": ns}}
        ),
        Reason.KIND_NOT_INSTALLED,
        lambda ns: ("Gadget", "gadgets.example.com/v1", "install the operator"),
    ),
    Real(
        "422-schema-named-group",
        lambda kube, ns: kube.apply(_deployment(ns, replicas=-1)),
        Reason.OBJECT_INVALID,
        lambda ns: ("Deployment.apps", "spec.replicas", "schema of Deployment (apps/v1)", "fix the plan's template"),
    ),
    Real(
        "422-schema-core-group",
        lambda kube, ns: kube.apply(_config_map(ns, name="Not_A_Name")),
        Reason.OBJECT_INVALID,
        lambda ns: ('ConfigMap "Not_A_Name"', "metadata.name", "schema of ConfigMap (v1)", "fix the plan's template"),
    ),
    Real(
        "400-bad-request",
        lambda kube, ns: kube.create({**_config_map(ns), "data": {"password": {"nested": SECRET}}}),
        Reason.OBJECT_INVALID,
        lambda ns: ("ConfigMap", "schema of ConfigMap (v1)", "fix the plan's template"),
    ),
)

DENY_LABEL = "refusal-messages.opbroker.io/deny"
POLICY = "refusal-messages-deny"


@contextlib.contextmanager
def denying_policy(api: client.ApiClient) -> Iterator[None]:
    """A ValidatingAdmissionPolicy denying Secrets in namespaces labelled :data:`DENY_LABEL`, echoing their values
    (as a careless policy would), once enforced."""
    admission = client.AdmissionregistrationV1Api(api)
    admission.create_validating_admission_policy(
        {
            "metadata": {"name": POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["secrets"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "false",
                        "messageExpression": "'it holds: ' + (has(object.stringData) ? "
                        "object.stringData.map(k, object.stringData[k]).join(',') : '')",
                    }
                ],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {
            "metadata": {"name": POLICY},
            "spec": {
                "policyName": POLICY,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {DENY_LABEL: "true"}}},
            },
        }
    )
    core = client.CoreV1Api(api)
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": probe, "labels": {DENY_LABEL: "true"}}})

    def enforced() -> bool:
        try:
            core.create_namespaced_secret(probe, {"metadata": {"name": "p"}, "stringData": {"k": "v"}}, dry_run="All")
        except ApiException as exc:
            return exc.status in (403, 422)
        return False

    try:
        wait_for(enforced, 30, "the admission policy to be enforced")
        yield
    finally:
        core.delete_namespace(probe)
        admission.delete_validating_admission_policy_binding(POLICY)
        admission.delete_validating_admission_policy(POLICY)


def _shown(make: Callable[[], object]) -> tuple[str, str, Reason]:
    """What the controller shows of the refusal ``make`` meets: (the Ready message, the log's description, reason)."""
    try:
        make()
    except (ApiException, KubeError) as exc:
        shown = shown_for(exc)
        assert shown is not None, exc
        return shown.message, str(exc), shown.reason
    raise AssertionError("not refused")


def _assert_names(message: str, described: str, reason: Reason, want: Reason, names: tuple[str, ...]) -> None:
    assert reason is want, message
    for words in names:
        assert words in message, (words, message)
    for text in (message, described):
        assert SECRET not in text, text


@pytest.mark.parametrize("real", REAL, ids=[r.id for r in REAL])
def test_real_refusals_name_their_resource_group_and_fix(
    real: Real, api_client: client.ApiClient, bare_namespace: str
) -> None:
    namespace = bare_namespace
    kube = Kube(api_client)
    message, described, reason = _shown(lambda: real.make(kube, namespace))
    _assert_names(message, described, reason, real.reason, real.names(namespace))
    if reason in (Reason.ACCOUNT_LACKS_RIGHT, Reason.NAMESPACE_NOT_ONBOARDED):
        assert f'"{MASK}"' not in described, described  # the resource and group of the denial are whole


def test_a_real_admission_policys_denial_names_the_policy_and_the_kind(api_client: client.ApiClient) -> None:
    with denying_policy(api_client):
        namespace = f"deny-{uuid.uuid4().hex[:8]}"
        core = client.CoreV1Api(api_client)
        core.create_namespace({"metadata": {"name": namespace, "labels": {DENY_LABEL: "true"}}})
        try:
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "creds", "namespace": namespace},
                "stringData": {"password": SECRET},
            }
            message, described, reason = _shown(lambda: Kube(api_client).apply(secret))
            names = (f'ValidatingAdmissionPolicy "{POLICY}"', "of Secret (v1)", "ask the cluster's administrator")
            _assert_names(message, described, reason, Reason.ADMISSION_DENIED, names)
        finally:
            core.delete_namespace(namespace)


def test_a_real_namespace_being_deleted_names_the_namespace_and_what_to_do(api_client: client.ApiClient) -> None:
    """A namespace held in Terminating by a finalizer of an object in it: a write into it is refused (403)."""
    namespace = f"dying-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "held", "finalizers": ["opbroker.io/test-hold"]}, "data": {}}
    )
    try:
        core.delete_namespace(namespace)
        wait_for(lambda: core.read_namespace(namespace).status.phase == "Terminating", 30, "terminating")
        message, described, reason = _shown(lambda: Kube(api_client).apply(_deployment(namespace)))
        names = (f'namespace "{namespace}" is being deleted', "deployments.apps", "create it again")
        _assert_names(message, described, reason, Reason.NAMESPACE_TERMINATING, names)
    finally:
        with contextlib.suppress(ApiException):
            core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})


def test_a_real_kind_removed_since_discovery_names_the_kind_and_its_group(api_client: client.ApiClient) -> None:
    """A CRD the door saw served, deleted since (an operator uninstalled): the API server answers 404 "could not
    find the requested resource", shown as KindNotInstalled naming the kind, its group and version."""
    group = f"r{uuid.uuid4().hex[:6]}.refusal.example.com"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gizmos.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }
    extensions = client.ApiextensionsV1Api(api_client)
    extensions.create_custom_resource_definition(crd)
    kube = Kube(api_client)
    gizmo = {
        "apiVersion": f"{group}/v1",
        "kind": "Gizmo",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"password": SECRET},
    }

    def listed() -> bool:
        try:
            client.CustomObjectsApi(api_client).list_namespaced_custom_object(group, "v1", "default", "gizmos")
        except ApiException as exc:
            return exc.status == 404
        return True

    try:
        # Served first (the door remembers a group version it found unserved for a while), then seen by the door.
        wait_for(lambda: listed() is True and _discovered(api_client, group), 30, "the CRD to be served")
        assert kube.apply(gizmo)
    finally:
        extensions.delete_custom_resource_definition(f"gizmos.{group}")

    def gone() -> bool:
        try:
            client.CustomObjectsApi(api_client).list_namespaced_custom_object(group, "v1", "default", "gizmos")
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, 60, "the CRD to be gone")
    message, described, reason = _shown(lambda: kube.apply(gizmo))
    names = (f"Gizmo ({group}/v1)", "install the operator")
    _assert_names(message, described, reason, Reason.KIND_NOT_INSTALLED, names)


def _discovered(api: client.ApiClient, group: str) -> bool:
    """Whether the group version's discovery document lists the kind (what the door reads)."""
    try:
        found = Kube(api).custom.request("GET", f"/apis/{group}/v1")
    except ApiException:
        return False
    return any(r.get("kind") == "Gizmo" for r in (found or {}).get("resources") or [])
