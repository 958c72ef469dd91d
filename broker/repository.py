"""All the broker's Kubernetes reads and writes: catalog, instances, bindings, credentials, waiting.

Thin on purpose: each method is one or two API calls, translating the API server's answers into
:class:`Record` values or :class:`errors.BrokerError`. Decisions live in the pure core.

Finding an object by OSB id costs one GET in the usual case (the namespace comes from the operation
token, the namespace index or the default namespace). Only when none of those has it, and instances may
live in request-chosen namespaces, does the broker list cluster-wide with ``fieldSelector=metadata.name``
— the authoritative "it does not exist" that a 410 or a create needs — unless the namespace index has
synced and never saw the name, which is as good as authoritative and costs nothing.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api import conventions
from opbroker.api.catalog import OSB_GROUP, SFPlan, SFService
from opbroker.broker import catalogs, errors
from opbroker.broker.catalogs import Catalog
from opbroker.broker.decisions import settled
from opbroker.broker.locating import RECORDED, NamespaceIndex
from opbroker.broker.records import Kind, Record
from opbroker.broker.settings import Settings
from opbroker.kubeclient import answers
from opbroker.kubeclient.informer import BlockingSource, Collection, blocking_events
from opbroker.kubeclient.lean import LeanCustomObjects, object_path
from opbroker.kubeclient.wire import mapping_of, string_map_of

log = logging.getLogger(__name__)
VERSION = "v1alpha1"
#: Seconds a catalog read serves requests (ids it lacks force a fresh read).
CATALOG_TTL = 2.0
#: Namespaces whose labels are kept (for the allowed-namespace selector); the oldest read goes first.
NAMESPACE_CACHE_ENTRIES = 1024


def _refused(exc: ApiException, what: str) -> errors.BrokerError:
    """A write the API server refused for a reason the client can act on (before anything changed)."""
    if exc.status == 404:
        return errors.bad_request(f"{what}: the namespace does not exist")
    if exc.status == 403:
        return errors.bad_request(f"{what}: the broker is not allowed to write there")
    return errors.BrokerError(errors.Reason.INTERNAL_ERROR, f"{what}: the Kubernetes API answered {exc.status}")


class Repository:
    def __init__(self, api_client: client.ApiClient, settings: Settings, index: NamespaceIndex | None = None) -> None:
        self.settings = settings
        self.index = index
        self.custom = LeanCustomObjects(api_client)
        """Every request of the broker's, as plain JSON (``kubeclient.lean``: the typed client's per-call
        machinery cost more than the request)."""
        #: The catalog and when its read began.
        self._catalog: tuple[float, Catalog] | None = None
        self._catalog_lock = threading.Lock()
        #: The catalog read under way (when it began, its result), which requests finding the cache stale join.
        self._catalog_flight: tuple[float, Future[Catalog]] | None = None
        self._namespaces: OrderedDict[str, tuple[float, dict[str, str] | None]] = OrderedDict()
        self._namespaces_lock = threading.Lock()

    # -- catalog -------------------------------------------------------------------------------------

    def catalog(self, *, wanting: Iterable[str | None] = ()) -> Catalog:
        """The catalog, read at most once per ``CATALOG_TTL`` seconds — and at once when a request names a
        service or plan id the cached one lacks, so a plan registered a moment ago is never refused.

        A change to an existing plan is seen within the TTL; replicas may differ by that much. One read at a
        time: a request finding the catalog stale while a read is under way waits for that read (its answer or
        its error) instead of listing the catalog again — 32 concurrent provisions made 61 reads of a 2 s TTL
        in 20 s (issue 31). If that read began before the request and lacks an id the request names, the
        request waits for one more (begun after it): so at most two reads' time, each bounded by its deadline.
        """
        wanted = [i for i in wanting if i]
        asked = time.monotonic()
        if (cached := self._usable_catalog(wanted, asked)) is not None:
            return cached
        while True:
            with self._catalog_lock:
                flight = self._catalog_flight
                leading = flight is None
                if flight is None:
                    flight = self._catalog_flight = (time.monotonic(), Future())
            began, read = flight
            if leading:
                self._lead_catalog_read(began, read)
            catalog: Catalog = read.result()
            if began >= asked or all(catalog.service(i) or catalog.plan(i) for i in wanted):
                return catalog

    def _lead_catalog_read(self, began: float, read: Future[Catalog]) -> None:
        """Read the catalog for every request waiting on ``read`` and keep it; the next read may begin as soon
        as this one has its result (the flight is cleared before anyone is told)."""
        try:
            catalog = self._read_catalog()
        except BaseException as exc:
            self._land()
            read.set_exception(exc)
            return
        self._catalog = (began, catalog)
        self._land()
        read.set_result(catalog)

    def _land(self) -> None:
        with self._catalog_lock:
            self._catalog_flight = None

    def _usable_catalog(self, wanted: list[str], now: float) -> Catalog | None:
        """The cached catalog if it is fresh and has every ``wanted`` id."""
        cached = self._catalog
        if cached is None or now - cached[0] >= CATALOG_TTL:
            return None
        if all(cached[1].service(i) or cached[1].plan(i) for i in wanted):
            return cached[1]
        return None

    def _read_catalog(self) -> Catalog:
        """SFServices and SFPlans of the trusted namespaces only (:func:`catalogs.read` decides the rest)."""
        services: list[dict[str, Any]] = []
        plans: list[dict[str, Any]] = []
        for namespace in self.settings.trusted_namespaces:
            services += self._list(SFService.PLURAL, namespace)
            plans += self._list(SFPlan.PLURAL, namespace)
        catalog, problems = catalogs.read(services, plans)
        for problem in problems:
            log.warning("%s", problem)
        return catalog

    def _list(self, plural: str, namespace: str, **kwargs: Any) -> list[dict[str, Any]]:
        listed: dict[str, Any] = answers.json_object(
            self.custom.list_namespaced_custom_object(OSB_GROUP, VERSION, namespace, plural, **kwargs)
        )
        items: list[dict[str, Any]] = listed.get("items", [])
        return items

    # -- namespaces ----------------------------------------------------------------------------------

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        """The labels of Namespace ``name`` (None: it does not exist), reused for ``namespace_labels_ttl``
        seconds; at most :data:`NAMESPACE_CACHE_ENTRIES` namespaces are kept."""
        now = time.monotonic()
        with self._namespaces_lock:
            cached = self._namespaces.get(name)
            if cached is not None and now - cached[0] < self.settings.namespace_labels_ttl:
                return cached[1]
        try:
            found = answers.json_object(self.custom.request("GET", object_path("/api/v1", "namespaces", None, name)))
            labels: dict[str, str] | None = dict(string_map_of(mapping_of(found.get("metadata")).get("labels")))
        except ApiException as exc:
            if exc.status != 404:
                raise
            labels = None
        with self._namespaces_lock:
            self._namespaces[name] = (now, labels)
            self._namespaces.move_to_end(name)
            while len(self._namespaces) > NAMESPACE_CACHE_ENTRIES:
                self._namespaces.popitem(last=False)
        return labels

    def ping(self) -> None:
        """One cheap read of the control-plane namespace (readiness)."""
        self.custom.list_namespaced_custom_object(
            OSB_GROUP, VERSION, self.settings.namespace, SFService.PLURAL, limit=1
        )

    # -- lookups -------------------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str, name: str) -> Record | None:
        try:
            found: dict[str, Any] = answers.json_object(
                self.custom.get_namespaced_custom_object(OSB_GROUP, VERSION, namespace, kind.plural, name)
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return Record.from_object(kind, found)

    def located(self, kind: Kind, name: str) -> Record | None:
        """The recorded object called ``name`` where the namespace index says it is (one GET), or None: the index
        does not know the name, or it was not there (the index is a hint; the caller asks :meth:`find` then)."""
        namespace = self.index.get(kind, name) if self.index is not None else None
        record = self.get(kind, namespace, name) if namespace else None
        return record if record is not None and record.recorded else None

    def find(
        self, kind: Kind, name: str, hints: Iterable[str | None] = (), *, before_create: bool = False
    ) -> Record | None:
        """The object the broker recorded for the OSB id whose name is ``name``, wherever it lives: hinted
        namespaces first, then (if needed) a list.

        Only an object carrying the broker's record stamp (``Record.recorded``) answers for an id: a tenant may
        create an SFServiceInstance under any name in its own namespace, and the stamp is a label no tenant may
        write (``opbroker.api.admission``). An unstamped object in the namespace the caller would create into
        holds the name there: refused (409) naming it, never chosen. Two stamped objects of one name (one id
        recorded into two namespaces) are reported (409), not chosen either.

        ``before_create``: the caller creates the object if none is found, into the first hinted namespace.
        Then a name the synced index has never seen is taken as absent without a GET (a provision or bind
        of a new id is the common case, and those GETs were a fifth of the broker's requests): should it
        exist after all, in that namespace, the create fails with AlreadyExists and the caller asks again
        without ``before_create``. Elsewhere, the index's lag is the same window the list below accepts.
        """
        hinted = [namespace for namespace in hints if namespace]
        index_seen = self.index is not None and self.index.seen(kind, name)
        index_hint = self.index.get(kind, name) if self.index is not None else None
        synced = self.index is not None and self.index.synced[kind].is_set()
        if before_create and synced and not index_seen:
            return None
        tried: list[str] = []
        for namespace in (*hinted, index_hint, self.settings.default_instance_namespace):
            if namespace and namespace not in tried:
                tried.append(namespace)
                record = self.get(kind, namespace, name)
                if record is not None and record.recorded:
                    return record
                if record is not None and hinted and namespace == hinted[0]:
                    raise errors.BrokerError(
                        errors.Reason.CONFLICT,
                        f"{kind.plural} {namespace}/{name} exists but was not recorded by the broker: it answers for "
                        "no OSB id, and the id cannot be recorded there while it exists",
                    )
        if not self.settings.context_namespaces:
            return None
        if synced and not index_seen:
            # The synced index has never seen it: skip the cluster-wide list (it costs the API server a scan of
            # every object of the kind). Two replicas creating one id into two namespaces within the index's
            # lag could both succeed; the same namespace is caught by the API server's AlreadyExists.
            return None
        listed: dict[str, Any] = answers.json_object(
            self.custom.list_cluster_custom_object(
                OSB_GROUP, VERSION, kind.plural, field_selector=f"metadata.name={name}", label_selector=RECORDED
            )
        )
        items = listed.get("items", [])
        if not items:
            return None
        if len(items) > 1:
            where = sorted(str(item["metadata"].get("namespace")) for item in items)
            raise errors.BrokerError(
                errors.Reason.CONFLICT,
                f"the OSB id of {kind.plural} {name} is recorded in more than one namespace ({', '.join(where)}): "
                "none answers for it until an administrator removes the extra one",
            )
        record = Record.from_object(kind, items[0])
        if self.index is not None:
            self.index.note(kind, record.name, record.namespace)
        return record

    def bindings_of(self, instance: Record) -> list[Record]:
        """Bindings of ``instance`` that still exist (as the controller counts them: by spec.instanceId)."""
        ids = {instance.spec.get("instanceId"), instance.name}
        return [
            Record.from_object(Kind.BINDING, item)
            for item in self._list(Kind.BINDING.plural, instance.namespace)
            if (item.get("spec") or {}).get("instanceId") in ids
        ]

    def live_bindings(self, instance: Record) -> int:
        return len(self.bindings_of(instance))

    def await_settled(self, bindings: Iterable[Record], timeout: float) -> None:
        """Wait (up to ``timeout`` in all) until each binding is recorded or withdrawn (:func:`decisions.settled`)."""
        deadline = time.monotonic() + timeout
        for binding in bindings:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self.wait(Kind.BINDING, binding.namespace, binding.name, functools.partial(settled, binding.uid), remaining)

    def await_no_bindings(self, instance: Record, timeout: float) -> int:
        """Poll :meth:`live_bindings` until it is 0 or ``timeout`` passes; the last count (one list if 0)."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            live = self.live_bindings(instance)
            remaining = deadline - time.monotonic()
            if not live or remaining <= 0:
                return live
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.5)

    # -- writes --------------------------------------------------------------------------------------

    def create(self, kind: Kind, manifest: dict[str, Any]) -> Record | None:
        """Create the object; ``None`` if one with that name appeared meanwhile (the caller decides again)."""
        namespace = manifest["metadata"]["namespace"]
        try:
            created: dict[str, Any] = answers.json_object(
                self.custom.create_namespaced_custom_object(OSB_GROUP, VERSION, namespace, kind.plural, manifest)
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise _refused(exc, f"recording the {kind.value} in namespace {namespace!r}") from None
        record = Record.from_object(kind, created)
        if self.index is not None:
            self.index.note(kind, record.name, record.namespace)
        return record

    def write_status(self, record: Record, status: dict[str, Any]) -> Record:
        patched: dict[str, Any] = answers.json_object(
            self.custom.patch_namespaced_custom_object_status(
                OSB_GROUP, VERSION, record.namespace, record.kind.plural, record.name, {"status": status}
            )
        )
        return Record.from_object(record.kind, patched)

    def queue_status(self, record: Record, status: dict[str, Any]) -> Record:
        """Write the requested state, unless the controller has already picked the request up.

        The object was just written by this request (created, or its spec changed) and ``record`` is that
        version. If it is still that version, the requested state goes in as is; if the controller got there
        first (it moved the state on), only ``lastOperation`` is written, so its progress is never turned
        back to ``in_queue``/``update``.
        """
        guarded = {"metadata": {"resourceVersion": record.resource_version}, "status": status}
        try:
            patched: dict[str, Any] = answers.json_object(
                self.custom.patch_namespaced_custom_object_status(
                    OSB_GROUP, VERSION, record.namespace, record.kind.plural, record.name, guarded
                )
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
            return self.write_status(record, {"lastOperation": status["lastOperation"]})
        return Record.from_object(record.kind, patched)

    def guarded_status(self, record: Record, status: dict[str, Any]) -> Record | None:
        """Write ``status`` only if the object is still at ``record``'s resourceVersion; ``None`` if it changed
        (or is gone) since ``record`` was read, and nothing was written."""
        guarded = {"metadata": {"resourceVersion": record.resource_version}, "status": status}
        try:
            patched: dict[str, Any] = answers.json_object(
                self.custom.patch_namespaced_custom_object_status(
                    OSB_GROUP, VERSION, record.namespace, record.kind.plural, record.name, guarded
                )
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return None
            raise
        return Record.from_object(record.kind, patched)

    def guarded_patch(self, record: Record, operations: list[dict[str, Any]]) -> Record | None:
        """Apply a JSON patch whose first operation tests ``record``'s resourceVersion; ``None`` if the object
        changed (or went) since ``record`` was read, and nothing was written: the caller decides again.

        The API server answers a failed test 422, as it answers a patch it refuses for any other reason (the
        CRD's schema, an admission policy): the object is read again to tell them apart. Still at ``record``'s
        version, the test passed and the patch itself was refused — raised (the client is answered at once), never
        taken for a race (the caller would decide again, be refused again, and end in "keeps changing")."""
        try:
            patched: dict[str, Any] = answers.json_object(
                self.custom.patch_namespaced_custom_object(
                    OSB_GROUP,
                    VERSION,
                    record.namespace,
                    record.kind.plural,
                    record.name,
                    operations,
                    _content_type="application/json-patch+json",
                )
            )
        except ApiException as exc:
            if exc.status in (404, 409) or (exc.status == 422 and self._moved(record)):
                return None
            raise
        return Record.from_object(record.kind, patched)

    def _moved(self, record: Record) -> bool:
        """Whether the object is gone or at another version than ``record``'s."""
        current = self.get(record.kind, record.namespace, record.name)
        return current is None or current.resource_version != record.resource_version

    def annotate(self, record: Record, annotations: dict[str, str]) -> None:
        if annotations:
            self.custom.patch_namespaced_custom_object(
                OSB_GROUP,
                VERSION,
                record.namespace,
                record.kind.plural,
                record.name,
                {"metadata": {"annotations": annotations}},
            )

    def delete(self, record: Record) -> None:
        """Delete exactly this object (uid precondition: never a newer one that took its name)."""
        try:
            self.custom.delete_namespaced_custom_object(
                OSB_GROUP,
                VERSION,
                record.namespace,
                record.kind.plural,
                record.name,
                body={"preconditions": {"uid": record.uid}},
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    # -- credentials ---------------------------------------------------------------------------------

    def bind_response(self, binding: Record) -> dict[str, Any]:
        """The bind response the controller stored in the binding's Secret. Never logged, never echoed in errors."""
        unavailable = errors.BrokerError(
            errors.Reason.INTERNAL_ERROR, f"the credentials of binding {binding.name!r} are not available"
        )
        if not binding.secret_ref:
            raise unavailable
        try:
            path = object_path("/api/v1", "secrets", binding.namespace, binding.secret_ref)
            secret = answers.json_object(self.custom.request("GET", path))
        except ApiException as exc:
            if exc.status == 404:
                raise unavailable from None
            raise
        encoded = string_map_of(secret.get("data")).get(conventions.CREDENTIALS_KEY)
        try:
            response = json.loads(base64.b64decode(encoded or ""))
        except ValueError:
            raise unavailable from None
        if not isinstance(response, dict):
            raise unavailable
        return response

    # -- waiting -------------------------------------------------------------------------------------

    def wait(
        self, kind: Kind, namespace: str, name: str, done: Callable[[Record | None], bool], timeout: float
    ) -> Record | None:
        """Watch the object until ``done`` says so or ``timeout`` passes; the last state seen (``None``: gone)."""
        deadline = time.monotonic() + timeout
        record = self.get(kind, namespace, name)
        while record is not None and not done(record):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            watched = Collection(
                f"{OSB_GROUP}/{VERSION}", kind.plural, namespace=namespace, field_selector=f"metadata.name={name}"
            )
            stream = BlockingSource(self.custom).watch(watched, record.resource_version, max(1, int(remaining + 0.999)))
            finished = False  # read to its end: the connection can serve the next request
            try:
                for event_type, obj in blocking_events(stream):
                    if event_type == "ERROR":  # a 410 among them: the version is gone, read the object again
                        break
                    if event_type == "BOOKMARK":
                        continue
                    seen = None if event_type == "DELETED" else Record.from_object(kind, obj)
                    if done(seen) or time.monotonic() >= deadline:
                        break
                else:
                    finished = True
            except ApiException as exc:
                if exc.status != 410:
                    raise
            finally:
                if finished:
                    stream.close()
                else:  # left mid-stream: what is unread would be the next request's answer
                    stream.abort()
            record = self.get(kind, namespace, name)
        return record
