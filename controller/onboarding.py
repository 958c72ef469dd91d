"""Onboarding a consumer namespace outside Pulumi (``opbroker namespace onboard``, ``opbroker dev``): the objects of
:func:`opbroker.api.controllerinstall.onboarding_objects`, server-side applied, and removed again by offboarding.

A namespace nobody onboarded has no ``opbroker`` account and no plan account bound there: what opbroker writes into
it is refused (403). Onboarding is the platform's act, done with the platform's rights (the kubeconfig given), not
the controller's: the controller's ClusterRole cannot create RoleBindings. With ``--onboard-namespace-selector`` the
controller onboards the namespaces the platform labelled (:class:`NamespaceOnboarder`), acting as the onboarder
account, whose rights are exactly that (:func:`opbroker.api.rbac.onboarder_rules`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opbroker.api.controllerinstall import MANAGED_BY_LABEL, namespace_writer, onboarding_objects
from opbroker.api.conventions import DEFAULT_PLAN_SERVICE_ACCOUNT, NAMESPACE_SERVICE_ACCOUNT
from opbroker.api.meta import ResourceRef
from opbroker.controller.runtime.clock import SYSTEM, Clock
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
    namespace should be and hand its name to the controller's loop; a task there (:meth:`start`) applies that
    through ``door``, the onboarder account's (which may write nothing else), each namespace's writes in the
    runtime's pool (``asyncio.to_thread``: issue 45's one concurrency rule), retrying a failed namespace after
    ``retry_seconds`` on ``clock``.
    """

    def __init__(
        self,
        door: Kube,
        control_plane: str,
        selector: str,
        plan_accounts: Sequence[str] = (DEFAULT_PLAN_SERVICE_ACCOUNT,),
        *,
        retry_seconds: float = 5.0,
        clock: Clock = SYSTEM,
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
        self._clock = clock
        """What a retry's pause is measured on (the real one by default)."""
        self._pending: asyncio.Queue[str] = asyncio.Queue()
        """The names to sync, filled and drained on the loop (a watch thread hands them over: :meth:`_hand`)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop the task runs on, once started."""
        self._tasks: set[asyncio.Task[None]] = set()
        """The draining task and the retries waiting: cancelled by :meth:`stop`."""

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
            self._hand(name)

    def _hand(self, name: str) -> None:
        """Queue ``name`` from the watch's thread: through the loop once started (an asyncio queue is not
        thread-safe); before, nothing drains the queue yet, so it is filled directly."""
        if self._loop is None:
            self._pending.put_nowait(name)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed (the process stops): nothing drains it any more
            self._loop.call_soon_threadsafe(self._pending.put_nowait, name)

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
        """Drain the names handed over, in a task on the running loop (call on it)."""
        self._loop = asyncio.get_running_loop()
        self._keep(self._loop.create_task(self._run(), name="namespace onboarding"))

    def stop(self) -> None:
        """Sync no more namespaces, drop the retries waiting (call on the loop). A sync in a pool thread ends as
        before: a stop never waited for it."""
        for task in list(self._tasks):
            task.cancel()

    def _keep(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self) -> None:
        while True:
            name = await self._pending.get()
            try:
                await asyncio.to_thread(self.sync, name)
            except Exception:  # a refusal or an unreachable API server: tried again, the rest go on
                logger.exception("onboarding the namespace %s failed; trying again in %.0f s", name, self.retry_seconds)
                self._keep(asyncio.get_running_loop().create_task(self._retry(name), name=f"onboarding retry {name}"))

    async def _retry(self, name: str) -> None:
        await self._clock.sleep(self.retry_seconds)
        self._pending.put_nowait(name)
