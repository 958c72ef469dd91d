"""The master installs opbroker's controller into a sister cluster that asks for it (``spec.controller``, issue
29): what Service Fabrik's Provisioner Controller does for each registered cluster.

The objects are the ControlPlane component's own (:func:`opbroker.api.controllerinstall.controller_objects`), so
a sister runs what a Pulumi-installed control plane runs; before them the namespace and the CRDs. Everything is
server-side applied under the field manager ``opbroker-master`` (another manager's fields are left alone; a
conflict on ours is forced), and deleted — in reverse order, CRDs and namespace kept (deleting a CRD deletes every
object of its kind) — when the opt-in is withdrawn or the SFCluster is deleted. Every call goes through the
sister's bounded client (:func:`opbroker.kubeclient.deadlines.bounded`: a deadline on each); nothing is listed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kubernetes.client.exceptions import ApiException

from opbroker.api import controllerinstall
from opbroker.api.cluster import SFClusterController, SFClusterControllerRule
from opbroker.api.crd import all_crds
from opbroker.api.meta import ResourceRef
from opbroker.controller.runtime.clock import SYSTEM
from opbroker.controller.runtime.kube import Kube
from opbroker.kubeclient.wire import JsonBody, JsonObject, mapping_of, text_of

#: The field manager of everything the master applies into a sister.
FIELD_MANAGER = "opbroker-master"
#: Seconds one installation or removal may take in all, checked between calls (each call has its own deadline,
#: the sister client's: connect 10 s, answer 60 s): a slow sister holds a worker for at most about this plus one
#: call, and the rest is applied at the next probe. 60 s: a local API server applied the 29 objects in 1.3 s
#: (the first time, CRDs included).
STEP_SECONDS = 60.0
#: The ``app.kubernetes.io/managed-by`` label of those objects (the component's say ``pulumi``).
MANAGED_BY = "opbroker-master"


class InstallError(RuntimeError):
    """Applying or deleting one of the controller's objects in a sister failed; the message names the object and
    the HTTP status (never a body: an answer may echo what was sent)."""


def desired(namespace: str, controller: SFClusterController) -> list[tuple[str, JsonBody]]:
    """The controller's objects for a sister, as the component builds them (pure)."""
    spec = controllerinstall.ControllerSpec(
        namespace=namespace,
        image=controller.image,
        replicas=controller.replicas,
        operator_rules=tuple(rule.model_dump(exclude_none=True) for rule in controller.operator_rules),
        cluster_operator_rules=tuple(rule.model_dump(exclude_none=True) for rule in controller.cluster_operator_rules),
        plan_accounts=tuple(controller.plan_accounts),
        webhook=controller.webhook,
        pods=controllerinstall.PodSettings(image_pull_policy=controller.image_pull_policy, managed_by=MANAGED_BY),
    )
    return controllerinstall.controller_objects(spec)


def prerequisites(namespace: str) -> list[JsonBody]:
    """The namespace and opbroker's CRDs: applied first, never removed."""
    labels = controllerinstall.common_labels("control-plane", {}, MANAGED_BY)
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}},
        *all_crds(),
    ]


def removable(namespace: str) -> list[tuple[str, JsonBody]]:
    """Every object an installation may have made, whatever its settings were (names depend on the namespace
    only): what removal deletes, in reverse creation order."""
    # A cluster-scoped rule makes the plan account's cluster-scoped role part of it (its name is fixed too).
    scoped = SFClusterControllerRule(api_groups=["removed"], resources=["removed"], verbs=["get"])
    every = desired(namespace, SFClusterController(image="removed", webhook=True, cluster_operator_rules=[scoped]))
    return list(reversed(every))


def controller_deployment(namespace: str) -> ResourceRef:
    """The controller's Deployment in a sister: whether it is available decides ``ControllerInstalled``."""
    return ResourceRef(
        api_version="apps/v1",
        kind="Deployment",
        name=controllerinstall.Names(namespace).controller,
        namespace=namespace,
    )


def _ref(manifest: JsonObject) -> ResourceRef:
    """Which object one of the manifests built here (by :func:`desired`, :func:`prerequisites`) is."""
    meta = mapping_of(manifest.get("metadata"))
    namespace = meta.get("namespace")
    return ResourceRef(
        api_version=text_of(manifest.get("apiVersion")) or "",
        kind=text_of(manifest.get("kind")) or "",
        name=text_of(meta.get("name")) or "",
        namespace=namespace if isinstance(namespace, str) else None,
    )


def _what(ref: ResourceRef) -> str:
    where = f"{ref.namespace}/" if ref.namespace else ""
    return f"{ref.kind} {where}{ref.name}"


def _failure(action: str, manifest: JsonObject, exc: Exception) -> InstallError:
    status = getattr(exc, "status", None)
    what = _what(_ref(manifest))
    if status == 403:
        return InstallError(f"the master's kubeconfig may not {action} {what} in the cluster (HTTP 403)")
    detail = f"HTTP {status}" if status is not None else type(exc).__name__
    return InstallError(f"{action} {what} failed: {detail}")


def _deadline(clock: Callable[[], float], seconds: float) -> Callable[[int, int, str], None]:
    end = clock() + seconds

    def check(done: int, total: int, action: str) -> None:
        if clock() > end:
            raise InstallError(
                f"gave up after {seconds:g}s with {done} of {total} objects {action}; continued at the next probe"
            )

    return check


def install(
    kube: Kube,
    namespace: str,
    objects: Sequence[tuple[str, JsonBody]],
    *,
    seconds: float = STEP_SECONDS,
    clock: Callable[[], float] = SYSTEM.monotonic,
) -> int:
    """Apply the prerequisites and the objects in order; the count applied. Stops at the first failure, or when
    ``seconds`` have passed (:data:`STEP_SECONDS`)."""
    applied = 0
    manifests = [*prerequisites(namespace), *(o for _, o in objects)]
    check = _deadline(clock, seconds)
    for manifest in manifests:
        check(applied, len(manifests), "applied")
        try:
            kube.apply(manifest, field_manager=FIELD_MANAGER)
        except Exception as exc:
            raise _failure("apply", manifest, exc) from None
        applied += 1
    return applied


def uninstall(
    kube: Kube, namespace: str, *, seconds: float = STEP_SECONDS, clock: Callable[[], float] = SYSTEM.monotonic
) -> int:
    """Delete every object an installation may have made; the count deleted (absent ones are skipped). Bounded
    like :func:`install`."""
    deleted = 0
    manifests = removable(namespace)
    check = _deadline(clock, seconds)
    for index, (_, manifest) in enumerate(manifests):
        check(index, len(manifests), "removed")
        try:
            deleted += bool(kube.delete(_ref(manifest)))
        except ApiException as exc:
            raise _failure("delete", manifest, exc) from None
        except Exception as exc:
            raise _failure("delete", manifest, exc) from None
    return deleted
