"""cert-manager, the third-party operator the certificates example plan drives: its controller built from the Go
module by ``scripts/build-cert-manager.sh`` (cached in ``$OPBROKER_CACHE/cert-manager-<version>-<key>``), its
CRDs from that module's ``deploy/crds``, and the identity it runs as — a ServiceAccount with only the rights
cert-manager's controllers use, logged in with a TokenRequest token through a kubeconfig of its own.

Why a process and not a pod: the SelfSigned and CA issuers need no network path into the cluster (no ACME
HTTP-01 solver pods, no webhook called back by the API server), so cert-manager needs what any API client
needs — a kubeconfig — and runs on a control plane without a node. The rights are the same a pod's
ServiceAccount would get from upstream's Helm chart (the controller's ClusterRoles, less ACME, ingress and
gateway), so moving it into a pod changes where it runs, not what it may do.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.controller.runtime.kube import Kube
from opbroker.devcluster.binaries import cache_dir, module_key
from opbroker.devcluster.crds import install_crds

REPO = Path(__file__).resolve().parent.parent  # devcluster/ sits at the repository's root
#: The cert-manager release (the ``github.com/cert-manager/cert-manager`` version the wrapper module pins).
VERSION = "1.21.2"
#: The committed wrapper module the controller is compiled from (go.mod, go.sum, its main).
MODULE = REPO / "devcluster" / "certmanagerbuild"
BUILD_SCRIPT = REPO / "scripts" / "build-cert-manager.sh"
#: Where cert-manager runs from and what it is called in the cluster.
NAMESPACE = "cert-manager"
ACCOUNT = "cert-manager"
#: How long the controller's token is valid: longer than any test session or demo; a platform running the
#: process for longer renews it by writing a new kubeconfig (or runs it in a pod, where the kubelet renews it).
TOKEN_SECONDS = 12 * 3600
FIELD_MANAGER = "opbroker-dev"
_WRITE = ["get", "list", "watch", "create", "update", "patch", "delete"]
#: What cert-manager's controllers for Certificates, CertificateRequests and (Cluster)Issuers do with the API
#: (upstream's Helm chart: the ClusterRoles controller-issuers, -clusterissuers, -certificates and
#: -approve:cert-manager-io, without ACME orders and challenges, ingress and gateway shims).
CONTROLLER_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["cert-manager.io"], "resources": ["issuers", "clusterissuers"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["cert-manager.io"],
        "resources": ["issuers/status", "clusterissuers/status"],
        "verbs": ["update", "patch"],
    },
    {"apiGroups": ["cert-manager.io"], "resources": ["certificates", "certificaterequests"], "verbs": _WRITE},
    {
        "apiGroups": ["cert-manager.io"],
        "resources": [
            "certificates/status",
            "certificaterequests/status",
            "certificates/finalizers",
            "certificaterequests/finalizers",
        ],
        "verbs": ["update", "patch"],
    },
    {
        "apiGroups": ["cert-manager.io"],
        "resources": ["signers"],
        "verbs": ["approve"],
        "resourceNames": ["issuers.cert-manager.io/*", "clusterissuers.cert-manager.io/*"],
    },
    # The Secrets it writes (keys and certificates) and reads (a CA issuer's key pair).
    {"apiGroups": [""], "resources": ["secrets"], "verbs": _WRITE},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]


class CertManagerError(RuntimeError):
    """cert-manager could not be built or installed."""


def root() -> Path:
    """The cache folder of the committed pin's build: ``bin/cert-manager-controller`` and ``crds/``."""
    return cache_dir() / f"cert-manager-{VERSION}-{module_key(MODULE)}"


def controller_binary() -> Path:
    return root() / "bin" / "cert-manager-controller"


def crd_manifests() -> list[dict[str, Any]]:
    """The module's own CRDs (deploy/crds; copied next to the binary by the build)."""
    files = sorted((root() / "crds").glob("*.yaml"))
    if not files:
        raise CertManagerError(f"no CRDs in {root() / 'crds'}: run {BUILD_SCRIPT}")
    return [doc for path in files for doc in yaml.safe_load_all(path.read_text()) if doc]


def ensure_built() -> Path:
    """The controller binary, building it first when missing (prints the build's progress)."""
    if not controller_binary().is_file():
        result = subprocess.run(["bash", str(BUILD_SCRIPT)], check=False)
        if result.returncode != 0 or not controller_binary().is_file():
            raise CertManagerError(f"building cert-manager {VERSION} failed (exit {result.returncode}); see above")
    return controller_binary()


def install(api: client.ApiClient) -> None:
    """The CRDs, the namespace, and the controller's account with :data:`CONTROLLER_RULES` (idempotent)."""
    install_crds(api, crd_manifests())
    kube = Kube(api)
    name = f"opbroker-dev:{ACCOUNT}"
    for manifest in (
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT, "namespace": NAMESPACE}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": CONTROLLER_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
        },
    ):
        kube.apply(manifest, field_manager=FIELD_MANAGER)


def write_kubeconfig(api: client.ApiClient, admin_kubeconfig: Path, path: Path) -> Path:
    """A kubeconfig logged in as the controller's ServiceAccount (a TokenRequest token, :data:`TOKEN_SECONDS`),
    for the same server and CA as ``admin_kubeconfig``; written 0600."""
    # No audiences: the API server's own (what a pod's projected token carries).
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS)
    )
    try:
        answer = client.CoreV1Api(api).create_namespaced_service_account_token(ACCOUNT, NAMESPACE, request)
    except ApiException as exc:
        raise CertManagerError(f"no token for {NAMESPACE}/{ACCOUNT}: {exc.status} {exc.reason}") from exc
    token = answer.status.token if answer.status is not None else None
    if not token:
        raise CertManagerError(f"the TokenRequest for {NAMESPACE}/{ACCOUNT} answered no token")
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": ACCOUNT, "context": {"cluster": cluster["name"], "user": ACCOUNT}}],
        "current-context": ACCOUNT,
    }
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def controller_command(kubeconfig: Path, *extra: str) -> Sequence[str]:
    """The controller's command line (all namespaces; ``--v`` is klog's verbosity)."""
    return [str(controller_binary()), "--kubeconfig", str(kubeconfig), *extra]


#: What examples/certificates renders, as operator rules for the plan account it acts as (the default,
#: ``opbroker-plans``): :func:`opbroker.devcluster.grants.grant_plan_account`'s form, or the ControlPlane
#: component's ``controller.operator_rules`` (Secrets are granted to every plan account).
PLAN_RULES: list[dict[str, Any]] = [
    {"api_groups": ["cert-manager.io"], "resources": ["issuers", "certificates"], "verbs": _WRITE},
]
