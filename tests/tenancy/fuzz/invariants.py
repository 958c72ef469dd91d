"""The cluster-wide invariants the tenant fuzzer checks after every step, as the admin; one named function each.

1. :func:`nothing_outside_changed` — no object in the victim's or the control plane's namespace changed except
   what the platform's own requests explain. Checked from watches (:class:`Watcher`), so a step costs no listing:
   every event on a watched kind in those namespaces that arrives while no platform step is running (or settling)
   is a violation. Registries in the control plane's namespace that belong to another namespace than the victim's
   (the tenant's own instances have registries there too) are the tenant's own doing and allowed. At the end of a
   run, :func:`snapshot_unchanged` compares full snapshots (``tests/tenancy_support.snapshot``) as a cross-check.
2. :func:`brokers_asked_only_for_own_ids` — the second broker (the Service Catalog side's OSB peer) received no
   request, outside the platform's steps, for an OSB id the platform uses, nor a request whose path is not one
   well-formed OSB path (an unescaped id with ``/``, ``..`` or ``%2e`` addresses something else).
3. :func:`victim_keeps_state_and_credentials` — the victim's instances and bindings are still ``succeeded`` /
   Ready with the same credentials, read by the admin and by the platform through opbroker's broker (a GET
   answered from the tenant's object is the broker's id index taken over).
4. :func:`controller_bounded` — the controller's threads, resident memory and work queue stay within bounds of
   their value at the run's start.
5. Victims still provision within a bound: the platform's steps (``Pair.platform_step``) raise ``PlatformFailed``
   past ``PROVISION_BOUND``; the runner reports that as ``victim_provisions_within_bound``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from opbroker.api.conventions import DEFAULT_NAMESPACE, resource_name
from opbroker.controller.osb.registries import LABEL_OWNER_NAMESPACE
from tests.tenancy.fuzz.executor import Pair, decode
from tests.tenancy_support import SNAPSHOT_CUSTOM, snapshot

DATABASES = ("demo.opbroker.io", "v1alpha1", "databases")
WATCHED_CUSTOM = (*SNAPSHOT_CUSTOM, DATABASES)
QUIET_SECONDS = 1.0
"""How long the victim's namespace must be quiet before a platform step counts as settled."""
SETTLE_BOUND = 8.0
THREADS_MARGIN, RSS_MARGIN_MIB, QUEUE_BOUND = 64, 512, 2000


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.message}"


@dataclass(frozen=True)
class Event:
    at: float
    type: str
    resource: str
    namespace: str
    name: str
    labels: tuple[tuple[str, str], ...]
    explained: bool


@dataclass
class Watcher:
    """Cluster-wide watches of the kinds a snapshot holds, keeping the events of the namespaces looked at."""

    admin: client.ApiClient
    namespaces: set[str] = field(default_factory=set)
    platform_active: bool = False
    events: list[Event] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    listed: dict[str, threading.Event] = field(default_factory=dict)
    """Per watched resource: set once its first list answered (so no event of a run is missed)."""
    victim_event_at: float = 0.0

    def start(self) -> None:
        core = client.CoreV1Api(self.admin)
        custom = client.CustomObjectsApi(self.admin)
        sources: list[tuple[str, Callable[..., Any]]] = [
            ("secrets", core.list_secret_for_all_namespaces),
            ("configmaps", core.list_config_map_for_all_namespaces),
        ]
        for group, version, plural in WATCHED_CUSTOM:

            def lister(group: str = group, version: str = version, plural: str = plural, **kw: Any) -> Any:
                return custom.list_cluster_custom_object(group, version, plural, **kw)

            sources.append((plural, lister))
        for resource, lister in sources:
            self.listed[resource] = threading.Event()
            thread = threading.Thread(target=self._run, args=(resource, lister), name=f"fuzz-watch-{resource}")
            thread.daemon = True
            thread.start()
            self.threads.append(thread)
        deadline = time.monotonic() + 60
        for resource, listed in self.listed.items():
            if not listed.wait(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"the fuzzer's watch of {resource} never listed")

    def stop(self) -> None:
        self.stopping.set()

    def _run(self, resource: str, lister: Callable[..., Any]) -> None:
        """List once for a resourceVersion, then watch from the last version seen; list again only after 410."""
        version: str | None = None
        while not self.stopping.is_set():
            try:
                if version is None:
                    listed = lister(limit=1)
                    meta = listed["metadata"] if isinstance(listed, dict) else listed.metadata
                    version = meta["resourceVersion"] if isinstance(meta, dict) else meta.resource_version
                self.listed[resource].set()
                stream = watch.Watch().stream(lister, resource_version=version, timeout_seconds=30)
                for raw in stream:
                    if self.stopping.is_set():
                        return
                    version = self._record(resource, raw) or version
            except ApiException as exc:
                if exc.status == 404:  # a kind this API server does not serve
                    self.listed[resource].set()
                    return
                if exc.status == 410:
                    version = None
                time.sleep(0.2)
            except Exception:
                time.sleep(0.2)

    def _record(self, resource: str, raw: dict[str, Any]) -> str | None:
        obj = raw["object"]
        if not isinstance(obj, dict):
            obj = self.admin.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
        meta: dict[str, Any] = obj["metadata"]
        namespace = meta.get("namespace") or ""
        version = str(meta.get("resourceVersion") or "") or None
        with self.lock:
            if namespace not in self.namespaces:
                return version
            now = time.monotonic()
            labels = tuple(sorted((meta.get("labels") or {}).items()))
            event = Event(now, raw["type"], resource, namespace, meta["name"], labels, self.platform_active)
            self.events.append(event)
            if namespace not in (DEFAULT_NAMESPACE,):
                self.victim_event_at = now
        return version

    def drain(self) -> list[Event]:
        with self.lock:
            taken, self.events = self.events, []
        return taken

    @contextmanager
    def platform(self, victim_ns: str) -> Iterator[None]:
        """Mark the platform's step: events until the victim's namespace is quiet again are explained."""
        self.platform_active = True
        try:
            yield
        finally:
            deadline = time.monotonic() + SETTLE_BOUND
            while time.monotonic() < deadline and time.monotonic() - self.victim_event_at < QUIET_SECONDS:
                time.sleep(0.1)
            self.platform_active = False


def nothing_outside_changed(pair: Pair, events: list[Event]) -> list[Violation]:
    """Invariant 1 (see the module docstring)."""
    found = []
    for event in events:
        if event.explained or event.type == "BOOKMARK":
            continue
        if event.namespace == DEFAULT_NAMESPACE and event.namespace != pair.victim_ns:
            owner = dict(event.labels).get(LABEL_OWNER_NAMESPACE)
            if owner is not None and owner != pair.victim_ns:
                continue  # a registry of the tenant's (or another namespace's) own objects
        found.append(
            Violation(
                "nothing_outside_changed",
                f"{event.type} {event.resource}/{event.name} in {event.namespace} with no platform request",
            )
        )
    return found


def malformed(path: str) -> bool:
    """Not one well-formed OSB path: an id put in unescaped (``/``, ``?``, ``#``) adds segments; ``.``/``..``
    (also as ``%2e``) are dot segments a server or proxy resolves to another resource."""
    segments = path.split("/")
    return OSB_PATH.match(path) is None or any(s in (".", "..") or unquote(s) in (".", "..") for s in segments)


OSB_PATH = re.compile(r"^/v2/service_instances/([^/]+)(?:/service_bindings/([^/]+))?(?:/last_operation)?$")


def brokers_asked_only_for_own_ids(pair: Pair, requests: list[dict[str, Any]]) -> list[Violation]:
    """Invariant 2 (see the module docstring). ``requests``: what the second broker received since the last check,
    with ``explained`` set for those received during a platform step."""
    assert pair.victim is not None
    found = []
    for request in requests:
        path = str(request.get("path", ""))
        if path == "/v2/catalog":
            continue
        match = OSB_PATH.match(path)
        if match is None or malformed(path):
            found.append(Violation("brokers_asked_only_for_own_ids", f"{request.get('method')} {path}: malformed"))
            continue
        if request.get("explained"):
            continue
        ids = {unquote(i) for i in match.groups() if i}
        stolen = ids & pair.victim.platform_ids
        if stolen:
            found.append(
                Violation(
                    "brokers_asked_only_for_own_ids",
                    f"{request.get('method')} {path}: the platform's id {sorted(stolen)} asked for by the tenant",
                )
            )
    return found


def victim_keeps_state_and_credentials(pair: Pair, *, through_broker: bool) -> list[Violation]:
    """Invariant 3 (see the module docstring)."""
    assert pair.victim is not None
    v, ns = pair.victim, pair.victim_ns
    found: list[Violation] = []

    def bad(message: str) -> None:
        found.append(Violation("victim_keeps_state_and_credentials", message))

    for plural, name in (
        ("sfserviceinstances", resource_name(v.sf_instance_id)),
        ("sfservicebindings", resource_name(v.sf_binding_id)),
    ):
        obj = pair.admin_get(plural, ns, name)
        state = ((obj or {}).get("status") or {}).get("state")
        if obj is None or state != "succeeded" or obj["metadata"].get("deletionTimestamp"):
            bad(f"{plural}/{name}: {'gone' if obj is None else state}")
    for plural, name, expected in (
        ("instances", v.sc_instance, ("True", "Provisioned")),
        ("bindings", v.sc_binding, ("True", "InjectedBindResult")),
    ):
        obj = pair.admin_get(plural, ns, name)
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        now = next(((c["status"], c["reason"]) for c in conditions if c["type"] == "Ready"), None)
        if now != expected:
            bad(f"{plural}/{name}: Ready {now}, not {expected}")
    try:
        secret = client.CoreV1Api(pair.stack.admin).read_namespaced_secret(v.sc_binding, ns)
        data = {k: str(value) for k, value in (secret.data or {}).items()}
        if data != v.sc_secret_data:
            bad(f"secrets/{v.sc_binding}: credentials changed ({sorted(decode(data))})")
    except ApiException as exc:
        bad(f"secrets/{v.sc_binding}: {exc.status}")
    if through_broker:
        for problem in pair.victim_as_platform_sees_it():
            bad(problem)
    return found


@dataclass
class ControllerFigures:
    threads: int
    rss_mib: float
    queue: float | None


def controller_figures(pid: int, metrics_url: str | None) -> ControllerFigures:
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    rss = int(re.search(r"^VmRSS:\s+(\d+)", status, re.M).group(1)) / 1024  # type: ignore[union-attr]
    queue = None
    if metrics_url:
        try:
            text = httpx.get(metrics_url, timeout=5).text
            match = re.search(r"^opbroker_workqueue_depth\s+([0-9.e+]+)", text, re.M)
            queue = float(match.group(1)) if match else None
        except httpx.HTTPError:
            queue = None
    return ControllerFigures(threads, rss, queue)


def controller_bounded(start: ControllerFigures, now: ControllerFigures) -> list[Violation]:
    """Invariant 4 (see the module docstring)."""
    found = []
    if now.threads > start.threads + THREADS_MARGIN:
        found.append(Violation("controller_bounded", f"threads {start.threads} → {now.threads}"))
    if now.rss_mib > start.rss_mib + RSS_MARGIN_MIB:
        found.append(Violation("controller_bounded", f"RSS {start.rss_mib:.0f} → {now.rss_mib:.0f} MiB"))
    if now.queue is not None and now.queue > QUEUE_BOUND:
        found.append(Violation("controller_bounded", f"work queue {now.queue:.0f} keys"))
    return found


def settled_snapshots(pair: Pair) -> dict[str, dict[str, Any]]:
    """The victim's and the control plane's namespaces as the admin reads them (the control plane's without the
    registries of other namespaces than the victim's, which the tenant's own objects legitimately write)."""
    taken = {f"{pair.victim_ns}/{k}": v for k, v in snapshot(pair.stack.admin, pair.victim_ns, DATABASES).items()}
    for key, value in snapshot(pair.stack.admin, DEFAULT_NAMESPACE).items():
        labels = (value["body"].get("metadata") or {}).get("labels") or {}
        owner = labels.get(LABEL_OWNER_NAMESPACE)
        if owner is not None and owner != pair.victim_ns:
            continue
        taken[f"{DEFAULT_NAMESPACE}/{key}"] = value
    return taken


def snapshot_unchanged(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[Violation]:
    """Invariant 1's cross-check at the end of a run: a full snapshot against the one taken after the platform's
    last step settled."""
    found = []
    for key in sorted(set(before) ^ set(after)):
        found.append(Violation("nothing_outside_changed", f"{key} {'went' if key in before else 'appeared'}"))
    for key in sorted(set(before) & set(after)):
        if before[key]["version"] != after[key]["version"]:
            found.append(Violation("nothing_outside_changed", f"{key} written (snapshot)"))
    return found
