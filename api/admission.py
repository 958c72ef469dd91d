"""The facts opbroker acts on, kept by the API server: one ValidatingAdmissionPolicy (issue 42).

The trust model says a tenant is admin of its own namespace: every verb on every kind and subresource there,
status, labels and annotations included. Some of what lives on a tenant's objects is nevertheless a *fact* the
controller and the broker act on — what was provisioned or bound, the state of an operation, where an instance
was placed, which object the broker recorded for an OSB id — and a fact a tenant could forge is no fact at all.
Rather than re-checking each such field wherever it is read (the last review found five paths that did not), the
API server refuses anyone but opbroker's own accounts writing them:

* **status** — the ``/status`` subresource of every opbroker kind: the controller's (and the broker's, which
  queues an operation there) record of what happened. A tenant's object reaches the controller with the status
  opbroker wrote or none (a create's status is dropped by the API server);
* **opbroker's labels and annotations** — every key under ``opbroker.io/`` on an opbroker kind (the broker's
  record stamp, placement, replication, request identities): no other account adds, changes or removes one.
  :data:`REQUEST_KEYS` lists the keys under the prefix that are requests a user may set (none yet);
* **placement** — an SFServiceInstance's ``spec.clusterId`` is the scheduler's decision: no other account sets or
  changes it;
* **admin requests** — ConfigMaps labelled :data:`opbroker.api.adminrequests.LABEL` in the control-plane
  namespace, which the controller executes (previews, rollouts): written by the broker's and the controller's
  accounts only.

Cluster administrators (``system:masters``) pass: they can remove the policy anyway, and the tests and
``opbroker dev`` run the controller with an administrator's credentials. Pure: the manifests as data, installed
by the ControlPlane component, ``opbroker dev`` and the tests' control plane (:func:`manifests`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from opbroker.api import adminrequests
from opbroker.api.controllerinstall import Names
from opbroker.api.conventions import DOMAIN, service_account_user
from opbroker.api.osb import SFServiceInstance
from opbroker.api.registry import RESOURCE_KINDS

#: Keys under this prefix on opbroker's kinds are opbroker's facts.
FACT_PREFIX = f"{DOMAIN}/"
#: Keys under :data:`FACT_PREFIX` that are a user's requests, not facts (none yet).
REQUEST_KEYS: tuple[str, ...] = ()
#: The group every cluster administrator is in: never refused (it can remove the policy anyway).
ADMIN_GROUP = "system:masters"
#: The API server's answer to a refused request: 403, not 422 — the request is not malformed, the writer lacks
#: the right.
REFUSAL_REASON = "Forbidden"
API_VERSION = "admissionregistration.k8s.io/v1"


@dataclass(frozen=True)
class Writers:
    """Who may write opbroker's facts: user names (ServiceAccounts as ``system:serviceaccount:ns:name``) and
    groups."""

    users: tuple[str, ...]
    groups: tuple[str, ...] = (ADMIN_GROUP,)

    def cel(self) -> str:
        """A CEL condition true when the request's user is one of these writers."""
        users = _cel_list(self.users)
        groups = _cel_list(self.groups)
        return (
            f"request.userInfo.username in {users} || "
            f"(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in {groups}))"
        )


def control_plane_writers(namespace: str) -> Writers:
    """The controller's and the broker's ServiceAccounts in the control-plane namespace (named as
    :class:`~opbroker.api.controllerinstall.Names` names them), and administrators."""
    names = Names(namespace)
    return Writers(
        users=(service_account_user(namespace, names.controller), service_account_user(namespace, names.broker))
    )


def _cel_list(values: Iterable[str]) -> str:
    quoted = ", ".join("'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'" for value in values)
    return f"[{quoted}]"


def _facts_of(field: str) -> list[dict[str, str]]:
    """Variables: the new and old ``metadata.<field>`` maps (empty when absent) and their fact keys."""
    requests = _cel_list(REQUEST_KEYS)
    prefix = _cel_list([FACT_PREFIX])[1:-1]
    return [
        {"name": f"new_{field}", "expression": f"has(object.metadata.{field}) ? object.metadata.{field} : {{}}"},
        {
            "name": f"old_{field}",
            "expression": (f"oldObject != null && has(oldObject.metadata.{field}) ? oldObject.metadata.{field} : {{}}"),
        },
        {
            "name": f"new_{field}_facts",
            "expression": f"variables.new_{field}.filter(k, k.startsWith({prefix}) && !(k in {requests}))",
        },
        {
            "name": f"old_{field}_facts",
            "expression": f"variables.old_{field}.filter(k, k.startsWith({prefix}) && !(k in {requests}))",
        },
    ]


def _unchanged(field: str) -> str:
    """CEL: every fact key of ``metadata.<field>`` is as it was (none on a create)."""
    return (
        f"variables.new_{field}_facts.all(k, k in variables.old_{field} && "
        f"variables.old_{field}[k] == variables.new_{field}[k]) && "
        f"variables.old_{field}_facts.all(k, k in variables.new_{field})"
    )


def _policy(name: str, constraints: dict[str, Any], conditions: list[dict[str, str]], **spec: Any) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy that fails closed (one the API server cannot evaluate refuses)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "opbroker"}},
        "spec": {"failurePolicy": "Fail", "matchConstraints": constraints, "matchConditions": conditions, **spec},
    }


def _refusing(expression: str, message: str) -> dict[str, str]:
    return {"expression": expression, "message": message, "reason": REFUSAL_REASON}


def facts_policy(name: str, writers: Writers) -> dict[str, Any]:
    """The policy over opbroker's kinds: status, ``opbroker.io/`` labels and annotations, placement."""
    plurals = sorted(kind.PLURAL for kind in RESOURCE_KINDS)
    rule = {
        "apiGroups": sorted({kind.GROUP for kind in RESOURCE_KINDS}),
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": [*plurals, *(f"{plural}/status" for plural in plurals)],
    }
    cluster_id = (
        "request.resource.resource != '" + SFServiceInstance.PLURAL + "' || variables.status || "
        "(oldObject == null ? !has(object.spec.clusterId) : "
        "(has(object.spec.clusterId) == has(oldObject.spec.clusterId) && "
        "(!has(object.spec.clusterId) || object.spec.clusterId == oldObject.spec.clusterId)))"
    )
    status = {
        "expression": "!variables.status",
        "messageExpression": (
            "'the status of ' + request.resource.resource + ' is written by opbroker alone: '"
            " + 'it records what opbroker did, a request goes in the spec'"
        ),
        "reason": REFUSAL_REASON,
    }
    return _policy(
        name,
        {"resourceRules": [rule]},
        [{"name": "not-opbroker", "expression": f"!({writers.cel()})"}],
        variables=[
            {"name": "status", "expression": "has(request.subResource) && request.subResource == 'status'"},
            *_facts_of("labels"),
            *_facts_of("annotations"),
        ],
        validations=[
            status,
            _refusing(_unchanged("labels"), f"labels under {FACT_PREFIX} are written by opbroker alone"),
            _refusing(_unchanged("annotations"), f"annotations under {FACT_PREFIX} are written by opbroker alone"),
            _refusing(cluster_id, "spec.clusterId is the scheduler's choice: opbroker alone sets it"),
        ],
    )


def admin_requests_policy(name: str, namespace: str, writers: Writers) -> dict[str, Any]:
    """The policy over admin-request ConfigMaps in the control-plane namespace: the controller executes them, so
    only the broker (which writes them) and the controller (which answers in them) may create, change or delete
    one — or label a ConfigMap as one."""
    label = adminrequests.LABEL
    labelled = (
        f"(object != null && has(object.metadata.labels) && '{label}' in object.metadata.labels) || "
        f"(oldObject != null && has(oldObject.metadata.labels) && '{label}' in oldObject.metadata.labels)"
    )
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"]}
    return _policy(
        name,
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceRules": [{**rule, "resources": ["configmaps"]}],
        },
        [
            {"name": "admin-request", "expression": labelled},
            {"name": "not-opbroker", "expression": f"!({writers.cel()})"},
        ],
        validations=[
            _refusing("false", f"ConfigMaps labelled {label} are admin requests: the broker alone writes them")
        ],
    )


def binding(policy: dict[str, Any]) -> dict[str, Any]:
    """The policy's binding: every namespace, refusals denied (not only warned or audited)."""
    name = policy["metadata"]["name"]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(policy["metadata"]["labels"])},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


def policy_names(namespace: str) -> tuple[str, str]:
    """The two policies' names: cluster-scoped, so they carry the control-plane namespace (two control planes
    in one cluster do not collide)."""
    return f"opbroker-{namespace}-facts", f"opbroker-{namespace}-admin-requests"


def manifests(namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """(role, manifest) of both policies and their bindings for the control plane in ``namespace``, in creation
    order (a binding after its policy)."""
    writers = control_plane_writers(namespace)
    facts, admin = policy_names(namespace)
    policies = {
        "facts": facts_policy(facts, writers),
        "admin-requests": admin_requests_policy(admin, namespace, writers),
    }
    return [
        item
        for role, policy in policies.items()
        for item in ((f"{role}-policy", policy), (f"{role}-policy-binding", binding(policy)))
    ]
