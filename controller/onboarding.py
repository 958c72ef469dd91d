"""Onboarding a consumer namespace outside Pulumi (``opbroker namespace onboard``, ``opbroker dev``): the objects of
:func:`opbroker.api.controllerinstall.onboarding_objects`, server-side applied, and removed again by offboarding.

A namespace nobody onboarded has no ``opbroker`` account and no plan account bound there: what opbroker writes into
it is refused (403). Onboarding is the platform's act, done with the platform's rights (the kubeconfig given), not
the controller's: the controller's ClusterRole cannot create RoleBindings. With ``--onboard-namespace-selector`` the
controller onboards the namespaces the platform labelled (:class:`NamespaceOnboarder`), acting as the onboarder
account, whose rights are exactly that (:func:`opbroker.api.rbac.onboarder_rules`).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opbroker.api.controllerinstall import MANAGED_BY_LABEL, namespace_writer, onboarding_objects
from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT, NAMESPACE_SERVICE_ACCOUNT
from opbroker.api.meta import ResourceRef
from opbroker.controller.runtime.kube import Kube, ref_of
from opbroker.kubeclient.wire import JsonBody, mapping_of, path_of, string_map_of, text_of

logger = logging.getLogger(__name__)

#: The field manager of what onboarding applies (``kubectl get -o yaml --show-managed-fields`` names it).
FIELD_MANAGER = "opbroker-onboarding"
#: ``app.kubernetes.io/managed-by`` of what onboarding applies.
MANAGED_BY = "opbroker-cli"

Progress = Callable[[str], None]


class NotOnboardable(RuntimeError):
    """The namespace cannot be onboarded as asked (it does not exist): something the user fixes."""


@dataclass(frozen=True)
class Onboarding:
    """One namespace's onboarding by one control plane."""

    namespace: str
    control_plane: str
    plan_accounts: Sequence[str] = (DEFAULT_PLAN_SERVICE_ACCOUNT,)

    def objects(self) -> list[tuple[str, JsonBody]]:
        return onboarding_objects(self.namespace, self.control_plane, self.plan_accounts, managed_by=MANAGED_BY)


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def onboard(kube: Kube, onboarding: Onboarding, progress: Progress | None = None) -> list[ResourceRef]:
    """Apply the control plane's namespace writer ClusterRole (the same the ControlPlane creates: applied again it
    changes nothing) and the namespace's objects; the refs of what was applied in the namespace."""
    if kube.get(ResourceRef(api_version="v1", kind="Namespace", name=onboarding.namespace)) is None:
        raise NotOnboardable(f"the namespace {onboarding.namespace} does not exist: create it first")
    kube.apply(namespace_writer(onboarding.control_plane, managed_by=MANAGED_BY), field_manager=FIELD_MANAGER)
    applied = []
    for _, manifest in onboarding.objects():
        kube.apply(manifest, field_manager=FIELD_MANAGER)
        ref = ref_of(manifest)
        applied.append(ref)
        _say(progress, f"applied {ref.kind} {ref.namespace}/{ref.name}")
    return applied


def offboard(kube: Kube, onboarding: Onboarding, progress: Progress | None = None) -> list[ResourceRef]:
    """Delete the namespace's onboarding objects (the plan accounts' bindings first, the account last); the refs
    of what was there. The namespace writer ClusterRole stays: other namespaces are bound to it."""
    deleted = []
    for _, manifest in reversed(onboarding.objects()):
        ref = ref_of(manifest)
        if kube.delete(ref):
            deleted.append(ref)
            _say(progress, f"deleted {ref.kind} {ref.namespace}/{ref.name}")
    return deleted


#: The kind the onboarder follows (``SourceWatchers.subscribe``: the informers take no core-group kind).
NAMESPACES = ("v1", "Namespace")
#: ``app.kubernetes.io/managed-by`` of what the controller onboards by label: only those it offboards again.
MANAGED_BY_CONTROLLER = "opbroker-controller"


class NamespaceOnboarder:
    """Onboards the namespaces whose labels match a selector (``--onboard-namespace-selector``), now or when they
    are labelled later, and offboards one whose labels stop matching — only an onboarding it made itself (its
    ``managed-by``), never one of ``opbroker namespace onboard`` or of a Pulumi program.

    The Namespace watch's events (:data:`NAMESPACES`; its thread must not wait on writes) only record what each
    namespace should be; a thread of its own applies that through ``door``, the onboarder account's (which may
    write nothing else), retrying a failed namespace after ``retry_seconds``.
    """

    def __init__(
        self,
        door: Kube,
        control_plane: str,
        selector: str,
        plan_accounts: Sequence[str] = (DEFAULT_PLAN_SERVICE_ACCOUNT,),
        *,
        retry_seconds: float = 5.0,
    ) -> None:
        from opbroker.api import selectors

        self.door = door
        self.control_plane = control_plane
        self.selector = selectors.parse(selector)
        self.plan_accounts = tuple(plan_accounts)
        self.retry_seconds = retry_seconds
        self._wanted: dict[str, bool] = {}
        """Each namespace seen: whether it should be onboarded (its labels match)."""
        self._settled: dict[str, bool] = {}
        """What was last made true of each namespace."""
        self._pending: queue.Queue[str | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def on_namespace(self, event_type: str, body: JsonBody) -> None:
        metadata = mapping_of(body.get("metadata"))
        name = text_of(metadata.get("name"))
        if not name:
            return
        if event_type == "DELETED" or metadata.get("deletionTimestamp"):
            self._wanted.pop(name, None)
            self._settled.pop(name, None)
            return
        wanted = self.selector.matches(string_map_of(metadata.get("labels")))
        if self._wanted.get(name) != wanted:
            self._wanted[name] = wanted
            self._pending.put(name)

    def sync(self, name: str) -> None:
        """Make ``name`` what it should be: onboarded, or not onboarded by this controller."""
        wanted = self._wanted.get(name)
        if wanted is None or self._settled.get(name) == wanted:
            return
        onboarding = Onboarding(name, self.control_plane, self.plan_accounts)
        if wanted:
            for _, manifest in onboarding_objects(
                name, self.control_plane, self.plan_accounts, managed_by=MANAGED_BY_CONTROLLER
            ):
                self.door.apply(manifest, field_manager=FIELD_MANAGER)
            logger.info("onboarded the namespace %s (its labels match %s)", name, self.selector)
        else:
            account = self.door.get(
                ResourceRef(api_version="v1", kind="ServiceAccount", namespace=name, name=NAMESPACE_SERVICE_ACCOUNT),
                fresh=True,
            )
            labels = string_map_of(path_of(account, "metadata", "labels"))
            if labels.get(MANAGED_BY_LABEL) == MANAGED_BY_CONTROLLER:
                offboard(self.door, onboarding)
                logger.info("offboarded the namespace %s (its labels no longer match %s)", name, self.selector)
        self._settled[name] = wanted

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="namespace onboarding", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._pending.put(None)

    def _run(self) -> None:
        while (name := self._pending.get()) is not None:
            try:
                self.sync(name)
            except Exception:  # a refusal or an unreachable API server: tried again, the rest go on
                logger.exception("onboarding the namespace %s failed; trying again in %.0f s", name, self.retry_seconds)
                retry = threading.Timer(self.retry_seconds, self._pending.put, (name,))
                retry.daemon = True
                retry.start()
