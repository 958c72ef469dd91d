"""An in-memory fake of the controller's Kubernetes wrapper (:class:`opbroker.controller.runtime.kube.Kube`).

The reconcilers' table tests run against this instead of a kube-apiserver: same public methods and
signatures as ``Kube``, the same answers for the same situations (None for 404, False for "already gone",
``ApiException(status=409)`` for a stale guarded write), and the API server's rules for what a write does:

* every write that changes an object gives it a new ``resourceVersion`` (one global, growing counter, as
  etcd's revision); a write that changes nothing is not stored and keeps the version;
* ``metadata.resourceVersion`` in a patch is a precondition: 409 when the object moved on;
* custom resources have ``generation`` (1 at creation, +1 when anything but metadata and status changes,
  +1 when they are marked for deletion) and a status subresource: the status endpoint changes only status,
  the main endpoint never changes status; core kinds here (Secret, ConfigMap) have no generation;
* delete of an object with finalizers only sets ``deletionTimestamp``; the write that removes its last
  finalizer removes it; no finalizer may be added to an object being deleted (422);
* server-side apply creates or updates by name; maps merge key by key, lists are replaced whole (the
  CRDs' and ConfigMaps' default); a field a manager applied before and no longer applies is removed unless
  another manager applies it too; ``ownerReferences`` merge by uid;
* merge patches follow RFC 7386 (null removes a key, lists replace).

Reads go through an :class:`ObjectStore` exactly as in ``Kube`` (an unfed store answers nothing, so reads
reach the fake's objects; a test can feed it and plant a stale copy to provoke a conflict), and every write's
answer is offered to it. Not modelled: the garbage collector (owner references never delete anything),
namespaces (any namespace exists), admission, schema validation and defaulting, watches.

Every write call is logged in :attr:`FakeKube.calls` (whether or not it changed anything), every event in
:attr:`FakeKube.events`; :meth:`FakeKube.writes` filters the log.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, overload

from kubernetes.client.rest import ApiException

from opbroker.api import servicecatalog
from opbroker.api.meta import ResourceRef
from opbroker.controller.runtime.jsoncopy import copy_json
from opbroker.controller.runtime.kube import FIELD_MANAGER, Kind, KubeError, clean_for_apply, event_body
from opbroker.controller.runtime.store import UNKNOWN, ObjectStore

ObjectKey = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" when cluster-scoped), name


@dataclass(frozen=True)
class KindInfo:
    api_version: str
    kind: str
    plural: str
    namespaced: bool = True
    custom: bool = True
    """A custom resource: has generation and a status subresource."""


@dataclass(frozen=True)
class Call:
    """One write asked of the fake."""

    verb: str
    """create, apply, patch, patch_status, delete, apply_secret, delete_secret, event"""
    kind: str
    namespace: str
    name: str
    field_manager: str | None = None


GROUP_VERSION = "osb.servicefabrik.io/v1alpha1"

DEFAULT_KINDS = (
    KindInfo(GROUP_VERSION, "SFServiceInstance", "sfserviceinstances"),
    KindInfo(GROUP_VERSION, "SFServiceBinding", "sfservicebindings"),
    KindInfo(GROUP_VERSION, "SFPlan", "sfplans"),
    KindInfo(GROUP_VERSION, "SFService", "sfservices"),
    KindInfo("demo.opbroker.io/v1alpha1", "Database", "databases"),
    KindInfo("v1", "Secret", "secrets", custom=False),
    KindInfo("v1", "ConfigMap", "configmaps", custom=False),
    KindInfo("v1", "Namespace", "namespaces", namespaced=False, custom=False),
    *(
        KindInfo(f"{api.GROUP}/{api.VERSION}", api.KIND, api.PLURAL, namespaced=api.SCOPE == "Namespaced")
        for api in (servicecatalog.Broker, servicecatalog.ServiceClass, servicecatalog.Instance, servicecatalog.Binding)
    ),
)


def api_error(status: int, reason: str, message: str) -> ApiException:
    """An ``ApiException`` as the client raises it for an API server's answer (status, reason, JSON body)."""
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": status,
        }
    )
    return exc


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge, null removes, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _leaves(value: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The paths of a config's fields (a map's keys recursively; a list is one atomic field)."""
    if isinstance(value, dict) and value:
        return set().union(*(_leaves(v, (*prefix, k)) for k, v in value.items()))
    return {prefix}


def _remove(obj: dict[str, Any], path: tuple[str, ...]) -> None:
    """Remove the field at ``path`` and the maps it leaves empty."""
    parents = [obj]
    for part in path[:-1]:
        child = parents[-1].get(part)
        if not isinstance(child, dict):
            return
        parents.append(child)
    parents[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):
        if parents[depth]:
            break
        parents[depth - 1].pop(path[depth - 1], None)


def _apply_merge(live: Any, config: Any, path: tuple[str, ...] = ()) -> Any:
    """Server-side apply's merge of a config into a live object: maps by key, ``ownerReferences`` by uid,
    other lists replaced."""
    if isinstance(live, dict) and isinstance(config, dict):
        merged = dict(live)
        for key, value in config.items():
            merged[key] = _apply_merge(live.get(key), value, (*path, key))
        return merged
    if path == ("metadata", "ownerReferences") and isinstance(live, list) and isinstance(config, list):
        by_uid = {ref.get("uid"): ref for ref in live}
        by_uid.update({ref.get("uid"): copy_json(ref) for ref in config})
        return list(by_uid.values())
    return copy_json(config)


def _body(obj: dict[str, Any]) -> dict[str, Any]:
    """What ``generation`` counts changes of: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _selected(obj: dict[str, Any], label_selector: str) -> bool:
    """Equality-based selectors only (``a=b,c=d``; ``a`` alone: the label exists)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in label_selector.split(","))):
        key, _, value = term.partition("=")
        if key.strip() not in labels or (value and labels[key.strip()] != value.lstrip("=").strip()):
            return False
    return True


class FakeKube:
    """An in-memory API server behind ``Kube``'s methods; see the module docstring for what it models."""

    def __init__(self, kinds: tuple[KindInfo, ...] = DEFAULT_KINDS) -> None:
        self.store = ObjectStore()
        self.objects: dict[ObjectKey, dict[str, Any]] = {}
        self.managed: dict[ObjectKey, dict[str, dict[str, Any]]] = {}
        """Per object, each field manager's last applied config (what server-side apply owns)."""
        self.calls: list[Call] = []
        self.events: list[dict[str, Any]] = []
        self._kinds: dict[tuple[str, str], KindInfo] = {}
        self._plurals: dict[tuple[str, str], KindInfo] = {}
        for info in kinds:
            self.register_kind(info)
        self._revision = itertools.count(1000)
        self._lock = threading.RLock()
        self.terminating_namespaces: set[str] = set()
        """Namespaces the fake reports as being deleted (phase Terminating); every other one is Active."""
        self.user: str | None = None
        self.acted_as: list[str | None] = []
        """Every identity a reconciler asked to act as (``Kube.acting_as``), in order; the fake authorises all."""

    def acting_as(self, user: str | None) -> FakeKube:
        """``Kube.acting_as``: recorded, and answered with this same fake (it models no authorisation)."""
        self.acted_as.append(user)
        return self

    # -- the fake's own API (for tests) ----------------------------------------------------------------

    def register_kind(self, info: KindInfo) -> None:
        group = info.api_version.rpartition("/")[0]
        self._kinds[(info.api_version, info.kind)] = info
        self._plurals[(group, info.plural)] = info

    def writes(self, verb: str | None = None, kind: str | None = None) -> list[Call]:
        """The write calls logged, optionally only those of one verb and/or kind."""
        return [c for c in self.calls if (verb is None or c.verb == verb) and (kind is None or c.kind == kind)]

    def object(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as the fake holds it (a copy), bypassing the store and the call log."""
        found = self.objects.get((api_version, kind, namespace, name))
        return None if found is None else copy_json(found)

    def custom_object(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        return self.object(kind.api_version, self._info_of(kind).kind, namespace, name)

    # -- helpers -----------------------------------------------------------------------------------------

    def _info(self, api_version: str, kind: str) -> KindInfo:
        info = self._kinds.get((api_version, kind))
        if info is None:
            raise KubeError(f"the API server does not serve {kind} in {api_version}")
        return info

    def _info_of(self, kind: Kind) -> KindInfo:
        info = self._plurals.get((kind.group, kind.plural))
        if info is None:
            raise KubeError(f"the API server does not serve {kind.plural} in {kind.api_version}")
        return info

    def _key(self, info: KindInfo, namespace: str | None, name: str) -> ObjectKey:
        return (info.api_version, info.kind, (namespace or "") if info.namespaced else "", name)

    def _log(self, verb: str, info: KindInfo, namespace: str | None, name: str, manager: str | None = None) -> None:
        self.calls.append(Call(verb, info.kind, (namespace or "") if info.namespaced else "", name, manager))

    def _create(self, info: KindInfo, key: ObjectKey, body: dict[str, Any]) -> dict[str, Any]:
        obj = copy_json(body)
        obj["apiVersion"], obj["kind"] = info.api_version, info.kind
        meta = obj.setdefault("metadata", {})
        if info.namespaced:
            meta["namespace"] = key[2]
        else:
            meta.pop("namespace", None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), resourceVersion=str(next(self._revision)))
        if info.custom:
            meta["generation"] = 1
            obj.pop("status", None)
        self.objects[key] = obj
        return copy_json(obj)

    def _store(
        self,
        info: KindInfo,
        key: ObjectKey,
        new: dict[str, Any],
        *,
        precondition: str | None = None,
        status_only: bool = False,
    ) -> dict[str, Any]:
        """Write ``new`` over the held object with the API server's rules; the object as written."""
        old = self.objects[key]
        old_meta, meta = old["metadata"], new.setdefault("metadata", {})
        if precondition is not None and precondition != old_meta["resourceVersion"]:
            raise api_error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {info.plural} "{key[3]}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )
        if info.custom and status_only:
            new = {**copy_json(old), "status": new.get("status")}
            if new["status"] is None:
                new.pop("status")
        elif info.custom:
            new = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                new["status"] = copy_json(old["status"])
        meta = new["metadata"]
        for field in ("uid", "creationTimestamp", "namespace", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        meta.pop("generation", None)
        if "generation" in old_meta:
            meta["generation"] = old_meta["generation"] + (1 if _body(new) != _body(old) else 0)
        new["apiVersion"], new["kind"] = info.api_version, info.kind
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise api_error(
                    422,
                    "Invalid",
                    f"{info.kind} {key[3]!r} is invalid: metadata.finalizers: Forbidden: no new finalizers can be "
                    "added if the object is being deleted",
                )
        if new == old:
            return copy_json(old)  # nothing changed: nothing is stored, the version stays
        meta["resourceVersion"] = str(next(self._revision))
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.objects[key]
            self.managed.pop(key, None)
        else:
            self.objects[key] = new
        return copy_json(new)

    def _keep(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        if obj is not None:
            self.store.put((obj["apiVersion"], obj["kind"]), obj)
        return obj

    def _keep_custom(self, kind: Kind, namespace: str, name: str, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        if obj is None:
            self.store.discard(kind.store_key, namespace, name)
        else:
            self.store.put(kind.store_key, obj)
        return obj

    def _delete(
        self, info: KindInfo, key: ObjectKey, uid: str | None = None, resource_version: str | None = None
    ) -> bool:
        obj = self.objects.get(key)
        if obj is None:
            return False
        meta = obj["metadata"]
        if uid is not None and meta["uid"] != uid:
            raise api_error(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, UID in object meta")
        if resource_version is not None and meta["resourceVersion"] != resource_version:
            raise api_error(
                409, "Conflict", f"Precondition failed: ResourceVersion in precondition: {resource_version}"
            )
        if not meta.get("finalizers"):
            del self.objects[key]
            self.managed.pop(key, None)
            return True
        if not meta.get("deletionTimestamp"):
            marked = copy_json(obj)
            marked["metadata"].update(
                deletionTimestamp=_now(), deletionGracePeriodSeconds=0, resourceVersion=str(next(self._revision))
            )
            if "generation" in meta:
                marked["metadata"]["generation"] = meta["generation"] + 1
            self.objects[key] = marked
        return True

    # -- Kube's methods: generic objects -----------------------------------------------------------------

    def plural_of(self, api_version: str, kind: str) -> tuple[str, bool]:
        info = self._info(api_version, kind)
        return info.plural, info.namespaced

    def get(self, ref: ResourceRef, *, fresh: bool = False) -> dict[str, Any] | None:
        info = self._info(ref.api_version, ref.kind)
        key = self._key(info, ref.namespace, ref.name)
        cached = UNKNOWN if fresh else self.store.lookup((ref.api_version, ref.kind), key[2] or None, ref.name)
        if cached is not UNKNOWN:
            return cached  # type: ignore[no-any-return]
        with self._lock:
            found = self.objects.get(key)
            return None if found is None else copy_json(found)

    def version_of(self, ref: ResourceRef) -> str | None:
        found = self.get(ref)
        return None if found is None else str(found["metadata"].get("resourceVersion", ""))

    @overload
    def apply(self, manifest: dict[str, Any], *, field_manager: str = FIELD_MANAGER) -> dict[str, Any]: ...

    @overload
    def apply(
        self, manifest: dict[str, Any], *, field_manager: str = FIELD_MANAGER, uid: str
    ) -> dict[str, Any] | None: ...

    def apply(
        self, manifest: dict[str, Any], *, field_manager: str = FIELD_MANAGER, uid: str | None = None
    ) -> dict[str, Any] | None:
        config = clean_for_apply(manifest)
        meta = config["metadata"]
        info = self._info(config["apiVersion"], config["kind"])
        key = self._key(info, meta.get("namespace"), meta["name"])
        with self._lock:
            self._log("apply", info, key[2], key[3], field_manager)
            if uid is not None:  # the API server's uid precondition: never create, never amend another
                live_uid = (self.objects.get(key) or {}).get("metadata", {}).get("uid")
                if live_uid is None:
                    return None
                if live_uid != uid:
                    raise ApiException(status=422, reason="metadata.uid: field is immutable")
            managers = self.managed.setdefault(key, {})
            if key not in self.objects:
                managers[field_manager] = copy_json(config)
                return self._keep(self._create(info, key, config))  # type: ignore[return-value]
            live = copy_json(self.objects[key])
            others = set().union(set(), *(_leaves(c) for m, c in managers.items() if m != field_manager))
            dropped = _leaves(managers.get(field_manager) or {}) - _leaves(config) - others
            for path in sorted(dropped, key=len, reverse=True):
                if path and path[0] != "status":
                    _remove(live, path)
            written = self._store(info, key, _apply_merge(live, config))
            if key in self.objects:
                managers[field_manager] = copy_json(config)
            return self._keep(written)  # type: ignore[return-value]

    def create(self, manifest: dict[str, Any]) -> dict[str, Any] | None:
        body = clean_for_apply(manifest)
        info = self._info(body["apiVersion"], body["kind"])
        key = self._key(info, body["metadata"].get("namespace"), body["metadata"]["name"])
        with self._lock:
            self._log("create", info, key[2], key[3])
            if key in self.objects:
                self.store.stale(key[:2], key[2] or None, key[3])  # as Kube does
                return None
            return self._keep(self._create(info, key, body))

    def merge_patch(self, ref: ResourceRef, patch: dict[str, Any]) -> dict[str, Any] | None:
        info = self._info(ref.api_version, ref.kind)
        key = self._key(info, ref.namespace, ref.name)
        with self._lock:
            self._log("patch", info, key[2], key[3])
            with self._behind(info, key):
                return self._keep(self._patch(info, key, patch))

    @contextlib.contextmanager
    def _behind(self, info: KindInfo, key: ObjectKey) -> Iterator[None]:
        """``Kube._behind``: a guarded write's 409 marks the store's copy of the object behind."""
        try:
            yield
        except ApiException as exc:
            if exc.status == 409:
                self.store.stale(key[:2], key[2] or None, key[3])
            raise

    def _patch(
        self, info: KindInfo, key: ObjectKey, patch: dict[str, Any], *, status_only: bool = False
    ) -> dict[str, Any] | None:
        old = self.objects.get(key)
        if old is None:
            return None
        precondition = (patch.get("metadata") or {}).get("resourceVersion")
        return self._store(
            info, key, merge_patch(copy_json(old), patch), precondition=precondition, status_only=status_only
        )

    def delete(self, ref: ResourceRef, *, resource_version: str | None = None) -> bool:
        info = self._info(ref.api_version, ref.kind)
        key = self._key(info, ref.namespace, ref.name)
        with self._lock:
            self._log("delete", info, key[2], key[3])
            found = self.objects.get(key)
            with self._behind(info, key):
                if found is not None and resource_version not in (None, found["metadata"]["resourceVersion"]):
                    raise api_error(409, "Conflict", "Precondition failed: the object has been modified")
            return self._delete(info, key)

    def list_objects(self, api_version: str, kind: str, namespace: str) -> list[dict[str, Any]]:
        info = self._info(api_version, kind)
        with self._lock:
            return [
                copy_json(obj)
                for (v, k, ns, _), obj in sorted(self.objects.items())
                if (v, k) == (info.api_version, info.kind) and ns == namespace
            ]

    # -- Kube's methods: our own custom resources --------------------------------------------------------

    def get_custom(self, kind: Kind, namespace: str, name: str, *, fresh: bool = False) -> dict[str, Any] | None:
        cached = UNKNOWN if fresh else self.store.lookup(kind.store_key, namespace, name)
        if cached is not UNKNOWN:
            return cached  # type: ignore[no-any-return]
        info = self._info_of(kind)
        with self._lock:
            found = self.objects.get(self._key(info, namespace, name))
            return None if found is None else copy_json(found)

    def list_custom(self, kind: Kind, namespace: str | None, label_selector: str = "") -> list[dict[str, Any]]:
        info = self._info_of(kind)
        with self._lock:
            return [
                copy_json(obj)
                for (v, k, ns, _), obj in sorted(self.objects.items())
                if (v, k) == (info.api_version, info.kind)
                and (namespace is None or not info.namespaced or ns == namespace)
                and _selected(obj, label_selector)
            ]

    def uids_of(self, kind: Kind) -> dict[tuple[str, str], str]:
        info = self._info_of(kind)
        with self._lock:
            return {
                (ns, name): obj["metadata"]["uid"]
                for (v, k, ns, name), obj in self.objects.items()
                if (v, k) == (info.api_version, info.kind)
            }

    def list_custom_page(
        self,
        kind: Kind,
        namespace: str | None,
        *,
        limit: int | None = None,
        token: str | None = None,
        label_selector: str = "",
    ) -> tuple[list[dict[str, Any]], str | None, str | None]:
        """Pages by position (the token is the next item's index); the version is the newest object's."""
        items = self.list_custom(kind, namespace, label_selector)
        start = int(token) if token else 0
        end = start + limit if limit else len(items)
        with self._lock:
            version = str(max((int(o["metadata"]["resourceVersion"]) for o in self.objects.values()), default=999))
        return items[start:end], (str(end) if end < len(items) else None), version

    def watch_custom(
        self, kind: Kind, *, resource_version: str, label_selector: str = "", timeout_seconds: int = 60
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Watches are not modelled: the watch ends at once with no change (as one whose time ran out)."""
        return iter(())

    def create_custom(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
        info = self._info_of(kind)
        key = self._key(info, body["metadata"].get("namespace"), body["metadata"]["name"])
        with self._lock:
            self._log("create", info, key[2], key[3])
            if key in self.objects:
                raise api_error(409, "AlreadyExists", f"{info.plural} {key[3]!r} already exists")
            created = self._create(info, key, body)
            self._keep_custom(kind, key[2], key[3], created)
            return created

    def delete_custom(self, kind: Kind, namespace: str, name: str, *, uid: str | None = None) -> bool:
        info = self._info_of(kind)
        with self._lock:
            self._log("delete", info, namespace, name)
            try:
                return self._delete(info, self._key(info, namespace, name), uid)
            except ApiException as exc:
                if uid is not None and exc.status == 409:
                    return False
                raise

    def patch_custom_status(
        self, kind: Kind, namespace: str, name: str, status: dict[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any] | None:
        info = self._info_of(kind)
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        with self._lock:
            self._log("patch_status", info, namespace, name)
            patched = self._patch(info, self._key(info, namespace, name), body, status_only=True)
            return self._keep_custom(kind, namespace, name, patched)

    def patch_custom(self, kind: Kind, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        info = self._info_of(kind)
        with self._lock:
            self._log("patch", info, namespace, name)
            patched = self._patch(info, self._key(info, namespace, name), patch)
            return self._keep_custom(kind, namespace, name, patched)

    # -- Kube's methods: secrets and events --------------------------------------------------------------

    def create_namespace(self, name: str) -> bool:
        """Namespaces are not modelled: each exists already."""
        return False

    def server_version(self, *, timeout: float) -> str:
        return "v1.fake"

    def list_nodes(self, *, timeout: float) -> list[Any]:
        """No nodes (a cluster's capacity is then its declared one)."""
        return []

    def list_pods(self, *, field_selector: str, timeout: float) -> list[Any]:
        return []

    def read_namespace(self, name: str) -> dict[str, Any] | None:
        """Namespaces are not modelled as objects: each exists, Active unless listed as terminating."""
        phase = "Terminating" if name in self.terminating_namespaces else "Active"
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}, "status": {"phase": phase}}

    def read_secret(
        self, namespace: str, name: str, *, stored: bool = False, followed: bool = False
    ) -> dict[str, Any] | None:
        with self._lock:
            found = self.objects.get(("v1", "Secret", namespace, name))
            return None if found is None else copy_json(found)

    def list_secrets(
        self, namespace: str | None, *, label_selector: str, limit: int = 500, metadata_only: bool = False
    ) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {"metadata": copy_json(obj["metadata"])} if metadata_only else copy_json(obj)
                for (v, k, ns, _), obj in sorted(self.objects.items())
                if (v, k) == ("v1", "Secret") and namespace in (None, ns) and _selected(obj, label_selector)
            ]

    def delete_secret(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        conflicts: bool = False,
    ) -> bool:
        info = self._info("v1", "Secret")
        with self._lock:
            self._log("delete_secret", info, namespace, name)
            key = self._key(info, namespace, name)
            try:
                deleted = self._delete(info, key, uid=uid, resource_version=resource_version)
            except ApiException as exc:
                if exc.status == 409 and conflicts:
                    self.store.stale(key[:2], namespace, name)  # as Kube does
                    raise
                if exc.status == 409:
                    return False
                raise
            if deleted:
                self.store.discard(("v1", "Secret"), namespace, name)  # as Kube does
            return deleted

    def apply_secret(
        self, manifest: dict[str, Any], *, resource_version: str | None = None, create: bool = False
    ) -> dict[str, Any]:
        meta = manifest["metadata"]
        info = self._info("v1", "Secret")
        key = self._key(info, meta["namespace"], meta["name"])
        with self._lock:
            live = self.objects.get(key)
            with self._behind(info, key):  # as Kube does: a 409 marks the copy held behind
                if create and live is not None:
                    raise api_error(409, "AlreadyExists", f'secrets "{meta["name"]}" already exists')
                if resource_version is not None and (live or {}).get("metadata", {}).get("resourceVersion") != (
                    resource_version
                ):
                    raise api_error(409, "Conflict", "the object has been modified; please apply your changes")
            written = self.apply(manifest)
            self.calls[-1] = Call(
                "apply_secret", "Secret", manifest["metadata"]["namespace"], written["metadata"]["name"]
            )
            return written

    def emit_event(self, obj: dict[str, Any], *, reason: str, message: str, warning: bool = False) -> None:
        meta = obj["metadata"]
        with self._lock:
            self.calls.append(Call("event", obj["kind"], meta.get("namespace", ""), meta["name"]))
            self.events.append(
                event_body(
                    obj, reason=reason, message=message, warning=warning, now=datetime.datetime.now(datetime.UTC)
                )
            )
