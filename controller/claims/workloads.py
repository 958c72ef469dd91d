"""Which workloads a claim binds into, and the projection itself. Pure.

Selection: by name, or by a Kubernetes label selector — ``matchLabels`` AND every ``matchExpressions``
requirement must hold (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, Kubernetes semantics: an empty
selector selects every workload of the kind; ``NotIn`` holds when the label is absent).

Projection (servicebinding.io "Workload Projection"), for every container and init container:

* a volume ``binding-<claim>`` from the binding Secret, mounted read-only at
  ``$SERVICE_BINDING_ROOT/<claim>``, where the root is the container's own ``SERVICE_BINDING_ROOT`` if it
  sets one as a literal, else ``/bindings`` (configurable), and then also set as that env var;
* one env var per binding entry, ``<CLAIM>_<KEY>`` (upper case, non-alphanumerics as ``_``), read from
  the Secret with ``secretKeyRef`` — no credential ever appears in the workload itself;
* a pod-template annotation ``binding.claims.opbroker.io/<claim>`` with the binding's content hash, so
  a credential rotation rolls the pods.

The projection is a server-side-apply patch under a field manager of its own per claim
(``opbroker-claim-<claim>``): applying it again is a no-op, and applying an empty patch under the same
manager removes exactly what this claim added — other claims' entries and the user's stay.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from opbroker.api.primaza import ApplicationSelector, LabelSelector
from opbroker.controller.claims.core import names
from opbroker.controller.claims.core.views import BINDING_ROOT_ENV, ContainerView, WorkloadView
from opbroker.kubeclient.wire import JsonBody

__all__ = ["BINDING_ROOT_ENV", "DEFAULT_BINDING_ROOT", "SUPPORTED_KINDS", "WorkloadView"]
DEFAULT_BINDING_ROOT = "/bindings"
#: Workload kinds a claim may bind into (all have ``spec.template``), as (apiVersion, kind).
SUPPORTED_KINDS: tuple[tuple[str, str], ...] = (
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
)


def supported(application: ApplicationSelector) -> bool:
    return (application.api_version, application.kind) in SUPPORTED_KINDS


def selector_matches(selector: LabelSelector, labels: Mapping[str, str] | None) -> bool:
    """Kubernetes label-selector semantics: every matchLabels entry and every expression must hold."""
    labels = labels or {}
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.match_expressions or []:
        present = requirement.key in labels
        values = requirement.values or []
        if requirement.operator == "In" and not (present and labels[requirement.key] in values):
            return False
        if requirement.operator == "NotIn" and present and labels[requirement.key] in values:
            return False
        if requirement.operator == "Exists" and not present:
            return False
        if requirement.operator == "DoesNotExist" and present:
            return False
    return True


def selected(application: ApplicationSelector, workload: WorkloadView) -> bool:
    """Whether ``workload`` (same namespace as the claim, checked by the caller) is bound into."""
    if (workload.api_version, workload.kind) != (application.api_version, application.kind):
        return False
    if workload.meta.deleting:
        return False
    if application.name is not None:
        return workload.meta.name == application.name
    assert application.selector is not None
    return selector_matches(application.selector, workload.meta.labels)


def volume_name(claim: str) -> str:
    return names.bounded("binding-" + claim.replace(".", "-"))


def hash_annotation(claim: str) -> str:
    return f"{names.BINDING_HASH_PREFIX}/{names.bounded(claim)}"


def env_prefix(claim: str) -> str:
    prefix = re.sub(r"[^A-Za-z0-9]", "_", claim).upper()
    return f"_{prefix}_" if prefix[:1].isdigit() else f"{prefix}_"


def env_name(claim: str, key: str) -> str:
    return env_prefix(claim) + re.sub(r"[^A-Za-z0-9]", "_", key).upper()


def _root_of(container: ContainerView, default_root: str) -> tuple[str, bool]:
    """(binding root, whether we may set the env var): the container's literal value wins."""
    if not container.sets_binding_root:
        return default_root, True
    if container.binding_root:
        return container.binding_root.rstrip("/") or "/", True
    return default_root, False  # set from elsewhere (valueFrom): leave it alone


def projection(
    workload: WorkloadView,
    *,
    claim: str,
    secret_name: str,
    keys: Sequence[str],
    content_hash: str,
    default_root: str = DEFAULT_BINDING_ROOT,
) -> JsonBody:
    """The server-side-apply patch that projects a binding into ``workload`` (see the module docstring)."""
    volume = volume_name(claim)
    projected: dict[str, list[JsonBody]] = {}
    for field, containers in (("initContainers", workload.init_containers), ("containers", workload.containers)):
        entries: list[JsonBody] = []
        for container in containers:
            root, set_root = _root_of(container, default_root)
            env: list[JsonBody] = [{"name": BINDING_ROOT_ENV, "value": root}] if set_root else []
            env += [
                {"name": env_name(claim, key), "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}}
                for key in sorted(keys)
            ]
            mount_path = f"{root.rstrip('/')}/{claim}"
            entries.append(
                {
                    "name": container.name,
                    "env": env,
                    "volumeMounts": [{"name": volume, "mountPath": mount_path, "readOnly": True}],
                }
            )
        if entries:
            projected[field] = entries
    return {
        **_identity(workload),
        "spec": {
            "template": {
                "metadata": {"annotations": {hash_annotation(claim): content_hash}},
                "spec": {"volumes": [{"name": volume, "secret": {"secretName": secret_name}}], **projected},
            }
        },
    }


def unprojection(workload: WorkloadView) -> JsonBody:
    """The empty apply that, under a claim's field manager, removes everything that claim projected."""
    return _identity(workload)


def _identity(workload: WorkloadView) -> JsonBody:
    """What names the workload in an apply patch."""
    return {
        "apiVersion": workload.api_version,
        "kind": workload.kind,
        "metadata": {"name": workload.meta.name, "namespace": workload.meta.namespace},
    }


def managed_by(workload: WorkloadView, manager: str) -> bool:
    """Whether ``manager`` owns any field of ``workload`` (i.e. a claim's projection is in it)."""
    return manager in workload.managers
