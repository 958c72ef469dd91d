"""The controller's only door to the Kubernetes API: a thin, synchronous wrapper over the project's transport.

Reconcilers call these from worker threads. Everything here is one API call (or a read-modify-write of
one object); decisions live elsewhere. Objects are plain dicts as on the wire: what goes in is a
:data:`~opbroker.kubeclient.wire.JsonObject` (read only), what comes back a
:data:`~opbroker.kubeclient.wire.JsonBody` — the caller's own (a decoded answer, or the store's copy), whose values
are narrowed with the wire's readers before use, or a view where a caller reads a few fields (Nodes, Pods).

Every request goes through :mod:`opbroker.kubeclient.lean` (issue 45: no generated API class); the official
client's ``ApiClient`` is kept only as what carries the configuration (server, credentials, default headers,
deadlines), and its ``ApiException`` subclasses are what a refused request raises.
"""

from __future__ import annotations

import datetime
import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, overload

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.api.meta import ResourceRef
from opbroker.controller.core.refusals import Refusal, Severity, masked_status, refusal, severity
from opbroker.controller.core.views import NodeView, PodView
from opbroker.controller.runtime import event_series
from opbroker.controller.runtime.access import Access, AccessReviews, api_reviewer
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.served import ServedKinds, ServedResource
from opbroker.controller.runtime.store import UNKNOWN, ObjectStore
from opbroker.kubeclient import deadlines
from opbroker.kubeclient.answers import json_object
from opbroker.kubeclient.informer import BlockingSource, Collection, items_of
from opbroker.kubeclient.lean import (
    JSON,
    MERGE_PATCH,
    METADATA_LIST,
    METADATA_PAGE,
    LeanCustomObjects,
    api_root,
    object_path,
)
from opbroker.kubeclient.wire import JsonBody, JsonObject, list_of, mapping_of, path_of, text_of

logger = logging.getLogger(__name__)

FIELD_MANAGER = "opbroker-controller"
#: Server-populated metadata that must never be sent back in an apply.
_SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")


class KubeError(RuntimeError):
    """An API call failed in a way worth retrying or reporting (never contains object contents)."""


class Refused(ApiException):
    """The API server refused an object we wrote, for a reason that lies in the object or its place (see
    :mod:`opbroker.controller.core.refusals`). Still an ``ApiException`` (with status and reason) for callers that
    handle those; its text is the refusal's masked description, never the response body."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(status=refusal.status, reason=refusal.reason)
        self.refusal = refusal

    def __str__(self) -> str:
        return self.refusal.describe()


def _refused(exc: ApiException, manifest: JsonObject, keep: tuple[str, ...] = ()) -> ApiException:
    """``exc`` as :class:`Refused` when the object (not the API server's state) is what was refused; else the
    same error (status, reason, headers) with its body masked the same way: an answer to a write may echo the
    object's values, and the exception's text ends up in logs and events when its retries give up."""
    if severity(exc.status) is not Severity.TRANSIENT:
        return Refused(refusal(exc.status, exc.body, manifest, keep))
    if exc.body is None:
        return exc
    answer = ApiException(status=exc.status, reason=exc.reason)
    answer.headers = exc.headers
    answer.body = masked_status(exc.status, exc.body, manifest, keep)
    return answer


@dataclass(frozen=True)
class Kind:
    """Where a custom resource of ours lives in the API."""

    group: str
    version: str
    plural: str
    namespaced: bool = True
    """False for a cluster-scoped kind (the Service Catalog's Broker and ServiceClass): ``namespace`` is then
    ignored by the ``*_custom`` methods."""

    @functools.cached_property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @functools.cached_property
    def store_key(self) -> tuple[str, str]:
        """One tuple for the kind's life: every key the store holds of it shares its strings (a new string per
        call cost each held object its own copy)."""
        return (self.api_version, self.plural)


#: Identities acted as at once, at most (each keeps a connection pool); the least recently used goes first.
MAX_ACTING_IDENTITIES = 64

#: Kubernetes' own Secret: the door keeps the Secrets it reads and writes in its store. The kinds of opbroker are
#: not named here — the runtime knows no kind (:mod:`opbroker.controller.kinds` names them).
SECRETS = ("v1", "Secret")


def ref_of(obj: JsonObject) -> ResourceRef:
    meta = mapping_of(obj.get("metadata"))
    namespace = meta.get("namespace")
    return ResourceRef(
        api_version=_string(obj, "apiVersion"),
        kind=_string(obj, "kind"),
        name=_string(meta, "name"),
        namespace=namespace if isinstance(namespace, str) else None,
    )


def _string(body: JsonObject, key: str) -> str:
    """``body[key]``, a string: a KeyError when it is absent, a ValueError when it is no string (what the
    reference's validation said of one)."""
    value = body[key]
    if not isinstance(value, str):
        raise ValueError(f"{key} is a {type(value).__name__}, not a string")
    return value


def describe(ref: ResourceRef) -> str:
    """``Kind namespace/name`` (``Kind name`` when cluster-scoped): how progress lines name an object."""
    return f"{ref.kind} {ref.namespace + '/' if ref.namespace else ''}{ref.name}"


def clean_for_apply(manifest: JsonObject) -> JsonBody:
    """A copy without status and server-populated metadata (templates may echo a live object back)."""
    body: JsonBody = {k: v for k, v in manifest.items() if k != "status"}
    body["metadata"] = _clean_metadata(mapping_of(body.get("metadata")))
    return body


def _clean_metadata(metadata: JsonObject) -> JsonBody:
    return {k: v for k, v in metadata.items() if k not in _SERVER_METADATA}


class Kube:
    """API access for the controller, shared by all workers.

    Reads of watched objects are answered from ``store`` when it knows them (see ``controller.store``);
    every write's answer goes into it, so a reconcile reads back at least what it wrote.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        store: ObjectStore | None = None,
        reviews: AccessReviews | None = None,
        acting_for: Kube | None = None,
        user: str | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.api_client = api_client
        self.clock = clock
        """What an Event's timestamps read (the runtime's clock; the real one by default)."""
        self.store = store if store is not None else ObjectStore()
        self.custom = LeanCustomObjects(api_client)
        """Our custom resources and every other per-object request, as plain JSON (``kubeclient.lean``)."""
        self.reviews = reviews if reviews is not None else AccessReviews(api_reviewer(self.custom))
        self.user = user
        """Who this door acts as: None for the controller itself, else the impersonated user (see
        :meth:`acting_as`)."""
        self._own = acting_for
        self.served: ServedKinds = acting_for.served if acting_for is not None else ServedKinds(self._discovery)
        """Which kinds the API server serves (one index for every door: :mod:`opbroker.controller.runtime.served`)."""
        self._event_series = event_series.EventSeries()
        self._acting: OrderedDict[str, Kube] = OrderedDict()
        self._acting_lock = threading.Lock()

    def acting_as(self, user: str | None) -> Kube:
        """This door, acting with ``user``'s rights (None: the controller's own).

        Every request goes to the API server impersonating ``user`` (``Impersonate-User``), so the API server
        authorises each write as it would that user's. Reads answered from the controller's store are first
        checked with a cached SubjectAccessReview for ``user`` (:mod:`opbroker.controller.runtime.access`): a plan's
        account reads through the cache only what it may read itself. The store, the discovery and the reviews
        are shared; one door per user is kept (at most :data:`MAX_ACTING_IDENTITIES`).
        """
        own = self._own or self
        if user is None or user == self.user:
            return self if user == self.user else own
        with own._acting_lock:
            door = own._acting.get(user)
            if door is None:
                api = deadlines.sibling(own.api_client)  # same deadlines; the user agent tells the controller apart
                api.set_default_header("Impersonate-User", user)  # type: ignore[no-untyped-call]
                door = Kube(api, store=own.store, reviews=own.reviews, acting_for=own, user=user, clock=own.clock)
                own._acting[user] = door
                while len(own._acting) > MAX_ACTING_IDENTITIES:
                    _, dropped = own._acting.popitem(last=False)
                    dropped.api_client.close()  # type: ignore[no-untyped-call]
                    dropped.custom.close()
            own._acting.move_to_end(user)
            return door

    def _may_read(self, resource: ServedResource, namespace: str | None, name: str) -> None:
        """Raise :class:`Refused` unless the acting user may ``get`` ``resource`` there (the controller itself
        may read whatever its store holds)."""
        self._may_get(resource.group, resource.name, resource.kind, namespace, name)

    def _may_get(self, group: str, plural: str, kind: str, namespace: str | None, name: str) -> None:
        if self.user is None or self.reviews.allowed(Access(self.user, "get", group, plural, namespace)):
            return
        where = f' in the namespace "{namespace}"' if namespace else ""
        message = f'User "{self.user}" cannot get resource "{plural}" in API group "{group}"{where}'
        target = {"kind": kind, "metadata": {"name": name, "namespace": namespace}}
        raise Refused(refusal(403, {"reason": "Forbidden", "message": message}, target, (self.user, plural, group)))

    def _named(self, *resource: str) -> tuple[str, ...]:
        """What an RBAC refusal may quote unmasked: the identity this door acts as and the resource it names (the
        plural and group written to: no secret, and what the reader must grant)."""
        return (*((self.user,) if self.user else ()), *resource)

    def _resource(self, api_version: str, kind: str) -> ServedResource:
        """Where the objects of a kind the API server serves are (:mod:`opbroker.controller.runtime.served`, one index
        for every door: a kind it does not serve — made up by a template or a record — is refused here)."""
        resource = self.served.resource(api_version, kind)
        if resource is None:
            raise KubeError(f"the API server does not serve {kind} in {api_version}")
        return resource

    def _discovery(self, path: str) -> object | None:
        """A discovery document (None: the group version is not served), as the controller reads it."""
        try:
            return json_object(self.custom.request("GET", path))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def plural_of(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from discovery."""
        resource = self._resource(api_version, kind)
        return resource.name, bool(resource.namespaced)

    # -- generic objects (rendered resources, sources) ------------------------------------------------

    def get(self, ref: ResourceRef, *, fresh: bool = False) -> JsonBody | None:
        """The object (None: it does not exist); ``fresh`` reads past the store, after a 409."""
        resource = self._resource(ref.api_version, ref.kind)
        namespace = ref.namespace if resource.namespaced else None
        cached = UNKNOWN if fresh else self.store.lookup((ref.api_version, ref.kind), namespace, ref.name)
        if cached is not UNKNOWN:
            self._may_read(resource, namespace, ref.name)
            return _optional_body(cached)
        path = _path_of(ref.api_version, resource, namespace, ref.name)
        try:
            found = _unless(404, lambda: self.custom.request("GET", path))
        except ApiException as exc:
            if exc.status == 403:
                target = {"kind": ref.kind, "metadata": {"name": ref.name, "namespace": namespace}}
                raise _refused(exc, target, self._named(resource.name, resource.group)) from None
            raise
        if found is None:
            return None
        body = json_object(found)
        self.store.fill((ref.api_version, ref.kind), body)  # held by metadata only: keep the body read
        return body

    def version_of(self, ref: ResourceRef) -> str | None:
        """The object's resourceVersion (None: it does not exist): from the store when it knows, else a GET."""
        resource = self._resource(ref.api_version, ref.kind)
        namespace = ref.namespace if resource.namespaced else None
        known = self.store.version_of((ref.api_version, ref.kind), namespace, ref.name)
        if known is not UNKNOWN:
            self._may_read(resource, namespace, ref.name)
            return None if known is None else str(known)
        found = self.get(ref)
        return None if found is None else str(mapping_of(found.get("metadata")).get("resourceVersion", ""))

    def _keep(self, answer: object) -> JsonBody:
        """Remember a write's answer (for fed types) and pass it on."""
        obj = json_object(answer)
        api_version, kind = text_of(obj.get("apiVersion")), text_of(obj.get("kind"))
        if api_version and kind:
            self.store.put((api_version, kind), obj)
        return obj

    @overload
    def apply(self, manifest: JsonObject, *, field_manager: str = FIELD_MANAGER) -> JsonBody: ...

    @overload
    def apply(self, manifest: JsonObject, *, field_manager: str = FIELD_MANAGER, uid: str) -> JsonBody | None: ...

    def apply(
        self, manifest: JsonObject, *, field_manager: str = FIELD_MANAGER, uid: str | None = None
    ) -> JsonBody | None:
        """Server-side apply: creates or updates, never duplicates, leaves fields of other managers alone.

        ``uid``: amend only the object of that uid, never create one. Server-side apply creates what does not
        exist, so a partial object applied to amend someone else's (a binding's user added to its instance's
        database) would otherwise bring a deleted object back, unstamped and half-specified; with the uid the
        API server refuses instead (409 when none exists: None here; 422 when another of that name does)."""
        body = clean_for_apply(manifest)
        meta = mapping_of(body["metadata"])
        if uid is not None:
            body["metadata"] = {**meta, "uid": uid}
        api_version = _string(body, "apiVersion")
        resource = self._resource(api_version, _string(body, "kind"))
        path = _path_of(api_version, resource, text_of(meta.get("namespace")), _string(meta, "name"))
        try:
            applied = self.custom.server_side_apply(path, body, field_manager=field_manager)
        except ApiException as exc:
            if uid is not None and exc.status == 409:
                return None  # gone (or deleted and not yet replaced): nothing to amend
            raise _refused(exc, body, self._named(resource.name, resource.group)) from None
        return self._keep(applied)

    def create(self, manifest: JsonObject) -> JsonBody | None:
        """Create; None if it already exists (the caller adopts it instead)."""
        body = clean_for_apply(manifest)
        api_version = _string(body, "apiVersion")
        resource = self._resource(api_version, _string(body, "kind"))
        path = _path_of(api_version, resource, text_of(path_of(body, "metadata", "namespace")))
        try:
            created = _unless(409, lambda: self.custom.request("POST", path, body=body))
        except ApiException as exc:
            raise _refused(exc, body, self._named(resource.name, resource.group)) from None
        if created is None:  # it exists: a copy held that says otherwise is behind (the next read goes to the API)
            meta = mapping_of(body["metadata"])
            namespace = text_of(meta.get("namespace")) if resource.namespaced else None
            self.store.stale((api_version, _string(body, "kind")), namespace, _string(meta, "name"))
            return None
        return self._keep(created)

    def merge_patch(self, ref: ResourceRef, patch: JsonObject) -> JsonBody | None:
        resource = self._resource(ref.api_version, ref.kind)
        path = _path_of(ref.api_version, resource, ref.namespace, ref.name)
        try:
            patched = _unless(404, lambda: self.custom.request("PATCH", path, body=patch, content_type=MERGE_PATCH))
        except ApiException as exc:
            self._behind(ref, resource.namespaced, exc)
            raise
        return None if patched is None else self._keep(patched)

    def delete(self, ref: ResourceRef, *, resource_version: str | None = None) -> bool:
        """Delete (background propagation); False if it was already gone. With ``resource_version``, only that
        version of it (a 409 ``ApiException`` when it changed since: a guarded write)."""
        resource = self._resource(ref.api_version, ref.kind)
        path = _path_of(ref.api_version, resource, ref.namespace, ref.name)
        body: JsonBody = {"propagationPolicy": "Background"}
        if resource_version is not None:
            body["preconditions"] = {"resourceVersion": resource_version}
        try:
            deleted = _unless(404, lambda: self.custom.request("DELETE", path, body=body))
        except ApiException as exc:
            self._behind(ref, resource.namespaced, exc)
            raise
        return deleted is not None

    def _behind(self, ref: ResourceRef, namespaced: bool | None, exc: ApiException) -> None:
        """A guarded write of ``ref`` met a 409: the copy held of it (a fed type's) is behind, and the next read
        goes to the API — the reconcile the runtime repeats on the conflict must not decide on it again."""
        if exc.status == 409:
            self.store.stale((ref.api_version, ref.kind), ref.namespace if namespaced else None, ref.name)

    # -- our own custom resources --------------------------------------------------------------------

    def get_custom(self, kind: Kind, namespace: str, name: str, *, fresh: bool = False) -> JsonBody | None:
        """The object (None if it does not exist); ``fresh`` reads past the store, after a 409."""
        cached = UNKNOWN if fresh else self.store.lookup(kind.store_key, namespace, name)
        if cached is not UNKNOWN:
            return _optional_body(cached)
        if not kind.namespaced:
            return _optional_body(
                _unless(404, lambda: self.custom.get_cluster_custom_object(kind.group, kind.version, kind.plural, name))
            )
        return _optional_body(
            _unless(
                404,
                lambda: self.custom.get_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name
                ),
            )
        )

    def _keep_custom(self, kind: Kind, namespace: str, name: str, answer: object) -> JsonBody | None:
        """Remember a write's answer; a 404 means the copy held (if any) is of an object that is gone."""
        obj = _optional_body(answer)
        if obj is None:
            self.store.discard(kind.store_key, namespace if kind.namespaced else None, name)
        else:
            self.store.put(kind.store_key, obj)
        return obj

    def list_custom(self, kind: Kind, namespace: str | None, label_selector: str = "") -> list[JsonBody]:
        """Every object of ``kind`` (in ``namespace``; everywhere when None or the kind is cluster-scoped)."""
        if namespace is None or not kind.namespaced:
            listed = self.custom.list_cluster_custom_object(
                kind.group, kind.version, kind.plural, label_selector=label_selector
            )
        else:
            listed = self.custom.list_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, label_selector=label_selector
            )
        return _items(json_object(listed))

    def list_custom_page(
        self,
        kind: Kind,
        namespace: str | None,
        *,
        limit: int | None = None,
        token: str | None = None,
        label_selector: str = "",
    ) -> tuple[list[JsonBody], str | None, str | None]:
        """One page of ``kind`` (in ``namespace``; everywhere when None): its items, the ``continue`` token of the
        next page (None: the last) and the list's resourceVersion (where a watch starts). A token that expired
        raises the API's 410."""
        arguments: dict[str, str | int] = {"label_selector": label_selector}
        if limit:
            arguments["limit"] = limit
        if token:
            arguments["_continue"] = token
        if namespace is None or not kind.namespaced:
            listed = self.custom.list_cluster_custom_object(kind.group, kind.version, kind.plural, **arguments)
        else:
            listed = self.custom.list_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, **arguments
            )
        answer = json_object(listed)
        meta = mapping_of(answer.get("metadata"))
        return _items(answer), text_of(meta.get("continue")), text_of(meta.get("resourceVersion"))

    def uids_of(self, kind: Kind) -> dict[tuple[str, str], str]:
        """The uid of every object of ``kind`` by (namespace, name): a metadata-only listing, :data:`METADATA_PAGE`
        a page — what a sweep needs to know of thousands of objects for a few requests, not one GET each."""
        found: dict[tuple[str, str], str] = {}
        listing = Collection(  # only the metadata is read: the items' kind is the partial object's
            kind.api_version, kind.plural, "PartialObjectMetadata", metadata_only=True, page=METADATA_PAGE
        )
        for page in BlockingSource(self.custom).pages(listing):
            for item in items_of(page):
                meta = mapping_of(item.get("metadata"))
                identity = (text_of(meta.get("namespace")) or "", text_of(meta.get("name")) or "")
                found[identity] = text_of(meta.get("uid")) or ""
        return found

    def create_custom(self, kind: Kind, body: JsonObject) -> JsonBody:
        """Create one of our objects (a 409 raises: it exists already)."""
        meta = mapping_of(body["metadata"])
        namespace = text_of(meta.get("namespace")) or ""
        if kind.namespaced:
            created = self.custom.create_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, body
            )
        else:
            created = self.custom.create_cluster_custom_object(kind.group, kind.version, kind.plural, body)
        written = json_object(created)
        self._keep_custom(kind, namespace, _string(meta, "name"), written)
        return written

    def delete_custom(self, kind: Kind, namespace: str, name: str, *, uid: str | None = None) -> bool:
        """Delete one of our objects (its finalizer then runs); False if it was already gone. With ``uid`` only
        that incarnation of the name: False too when the object of that name now is another (409)."""
        body = {"preconditions": {"uid": uid}} if uid else None
        if not kind.namespaced:
            gone = _unless(
                404,
                lambda: self.custom.delete_cluster_custom_object(
                    kind.group, kind.version, kind.plural, name, body=body
                ),
            )
            return gone is not None
        try:
            deleted = _unless(
                404,
                lambda: self.custom.delete_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name, body=body
                ),
            )
        except ApiException as exc:
            if uid and exc.status == 409:
                return False  # the name is another object's now: not ours to delete
            raise
        return deleted is not None

    def patch_custom_status(
        self, kind: Kind, namespace: str, name: str, status: JsonObject, *, resource_version: str | None = None
    ) -> JsonBody | None:
        """Merge-patch ``status``; with ``resource_version`` the write fails (409) if the object moved on."""
        body: JsonBody = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        if not kind.namespaced:
            patched = _unless(
                404,
                lambda: self.custom.patch_cluster_custom_object_status(
                    kind.group, kind.version, kind.plural, name, body
                ),
            )
        else:
            patched = _unless(
                404,
                lambda: self.custom.patch_namespaced_custom_object_status(
                    kind.group, kind.version, namespace, kind.plural, name, body
                ),
            )
        return self._keep_custom(kind, namespace, name, patched)

    def patch_custom(self, kind: Kind, namespace: str, name: str, patch: JsonObject) -> JsonBody | None:
        """A merge patch; include ``metadata.resourceVersion`` to guard it (409 if the object moved on)."""
        if not kind.namespaced:
            patched = _unless(
                404,
                lambda: self.custom.patch_cluster_custom_object(kind.group, kind.version, kind.plural, name, patch),
            )
        else:
            patched = _unless(
                404,
                lambda: self.custom.patch_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name, patch
                ),
            )
        return self._keep_custom(kind, namespace, name, patched)

    # -- secrets and events --------------------------------------------------------------------------

    def read_secret(
        self, namespace: str, name: str, *, stored: bool = False, followed: bool = False
    ) -> JsonBody | None:
        """The Secret (None if it does not exist); ``stored``: from the store when it holds the Secret's
        body (for Secrets only this controller writes, whose every write goes into the store too), and the
        body read is kept there (the Secret watch delivers metadata only, see ``controller.runtime.sources``).
        ``followed``: the caller knows the Secret, if it exists, is one the Secret watch follows, so its absence
        from the store is the Secret's (``ObjectStore.lookup``: a shard's watch follows part of the Secrets)."""
        if stored:
            held = self.store.lookup(SECRETS, namespace, name, followed=followed)
            if held is not UNKNOWN:
                self._may_get("", "secrets", "Secret", namespace, name)
                return _optional_body(held)
        secret = _optional_body(
            _unless(404, lambda: self.custom.request("GET", object_path("/api/v1", "secrets", namespace, name)))
        )
        if secret is None:
            return None
        if stored:
            self.store.fill(SECRETS, {"apiVersion": "v1", "kind": "Secret", **secret})
        return secret

    def list_secrets(
        self, namespace: str | None, *, label_selector: str, limit: int = 500, metadata_only: bool = False
    ) -> list[JsonBody]:
        """The Secrets in ``namespace`` (None: every namespace) matching ``label_selector``, read ``limit`` a page
        (bodies included: for Secrets this controller wrote, never for a cluster's worth). ``metadata_only``: each
        Secret's ``metadata`` alone (``PartialObjectMetadata``: the API server sends no data — what a sweep over
        thousands of registries needs, at a fraction of the bytes to decode)."""
        found: list[JsonBody] = []
        token: str | None = None
        path = object_path("/api/v1", "secrets", namespace)
        accept = METADATA_LIST if metadata_only else JSON
        while True:
            query = (("labelSelector", label_selector), ("limit", limit), ("continue", token))
            page = json_object(self.custom.request("GET", path, query=query, accept=accept))
            found.extend(_items(page))
            token = text_of(path_of(page, "metadata", "continue"))
            if not token:
                return found

    def delete_secret(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        conflicts: bool = False,
    ) -> bool:
        """Delete a Secret — only the one with ``uid``, only at ``resource_version``, if given; False if it was
        gone (or replaced, or written since). ``conflicts``: replaced or written since is a 409 raised (a guarded
        write in a reconcile: the runtime's conflict policy decides again on a fresh read), the copy held of it
        marked behind."""
        preconditions = {"uid": uid, "resourceVersion": resource_version}
        body = {"preconditions": {key: value for key, value in preconditions.items() if value}}
        try:
            self.custom.request("DELETE", object_path("/api/v1", "secrets", namespace, name), body=body)
        except ApiException as exc:
            if exc.status == 409 and conflicts:
                self.store.stale(SECRETS, namespace, name)
                raise
            if exc.status in (404, 409):
                return False
            raise
        self.store.discard(SECRETS, namespace, name)  # gone: a read until its watch event says so must not find it
        return True

    def create_namespace(self, name: str) -> bool:
        """Create the Namespace; False when it exists already."""
        body: JsonBody = {"metadata": {"name": name}}
        created = _unless(409, lambda: self.custom.request("POST", "/api/v1/namespaces", body=body))
        return created is not None

    # -- the cluster itself: version, nodes, pods, leases --------------------------------------------

    def server_version(self, *, timeout: float) -> str:
        """The API server's version (``/version``): one cheap request, raising if it does not answer in time."""
        info = mapping_of(self.custom.request("GET", "/version", timeout=timeout))
        return str(info.get("gitVersion"))

    def list_nodes(self, *, timeout: float) -> list[NodeView]:
        """Every Node (what the capacity reads of it: its capacity and allocatable)."""
        listed = json_object(self.custom.request("GET", "/api/v1/nodes", timeout=timeout))
        return [NodeView.of(node) for node in _items(listed)]

    def list_pods(self, *, field_selector: str, timeout: float) -> list[PodView]:
        """The Pods of every namespace matching ``field_selector`` (what the capacity reads of them)."""
        query = (("fieldSelector", field_selector),)
        listed = json_object(self.custom.request("GET", "/api/v1/pods", query=query, timeout=timeout))
        return [PodView.of(pod) for pod in _items(listed)]

    def read_namespace(self, name: str) -> JsonBody | None:
        """The Namespace (None if it does not exist)."""
        found = _unless(404, lambda: self.custom.request("GET", object_path("/api/v1", "namespaces", None, name)))
        return _optional_body(found)

    def apply_secret(
        self, manifest: JsonBody, *, resource_version: str | None = None, create: bool = False
    ) -> JsonBody:
        """Create or update a Secret we own, by server-side apply (no read needed); the Secret as written. An
        error answer is masked like any refused write's: it may echo the Secret's values. Guarded by what the
        writer read, where it read it: ``resource_version``, only over that version of it; ``create``, only when
        none exists (a plain create). A Secret written (or made) since is a 409, and the copy held of it is marked
        behind, so the reconcile the conflict repeats reads the API."""
        meta = mapping_of(manifest["metadata"])
        namespace, name = _string(meta, "namespace"), _string(meta, "name")
        if resource_version is not None:
            manifest = {**manifest, "metadata": {**meta, "resourceVersion": resource_version}}
        try:
            if create:
                query = (("fieldManager", FIELD_MANAGER),)
                written = self.custom.request(
                    "POST", object_path("/api/v1", "secrets", namespace), query=query, body=manifest
                )
            else:
                path = object_path("/api/v1", "secrets", namespace, name)
                written = self.custom.server_side_apply(path, manifest, field_manager=FIELD_MANAGER)
        except ApiException as exc:
            if exc.status == 409:
                self.store.stale(SECRETS, namespace, name)
            raise _refused(exc, manifest, self._named("secrets")) from None
        return self._keep(written)

    def emit_event(self, obj: JsonObject, *, reason: str, message: str, warning: bool = False) -> None:
        """Record a Kubernetes Event on ``obj``; the same Event again (object, type, reason, message) counts up the
        one recorded (:mod:`.event_series`). Best effort: a lost event must not fail a reconcile."""
        event = event_body(obj, reason=reason, message=message, warning=warning, now=self.clock.now())
        namespace = _string(mapping_of(event["metadata"]), "namespace")
        key = event_series.key_of(event)
        series = self.recorded_events
        try:
            recorded = series.get(key)
            if recorded is not None:
                count = recorded.count + 1
                patch = {"count": count, "lastTimestamp": event["lastTimestamp"]}
                path = object_path("/api/v1", "events", recorded.namespace, recorded.name)
                if _unless(404, lambda: self.custom.request("PATCH", path, body=patch, content_type=MERGE_PATCH)):
                    series.put(key, event_series.Recorded(recorded.namespace, recorded.name, count))
                    return
                series.forget(key)  # the API server has it no longer (an Event lives an hour): recorded anew
            # The answer is read to its end, which hands the connection back to the pool (an Event's answer left
            # unread kept its connection until the garbage collector closed it: one new TLS connection each).
            written = self.custom.request("POST", object_path("/api/v1", "events", namespace), body=event)
            name = mapping_of(mapping_of(written).get("metadata")).get("name")
            if isinstance(name, str):
                series.put(key, event_series.Recorded(namespace, name, 1))
        except ApiException as exc:
            name = path_of(obj, "metadata", "name")
            logger.warning("could not record event %s on %s: HTTP %s", reason, name, exc.status)

    @property
    def recorded_events(self) -> event_series.EventSeries:
        """The Events recorded lately, one memory for every door (:mod:`.event_series`)."""
        return (self._own or self)._event_series

    # -- listing arbitrary kinds (claims: workloads to project into) ----------------------------------

    def list_objects(self, api_version: str, kind: str, namespace: str) -> list[JsonBody]:
        """Every object of a namespaced kind in ``namespace``, as plain dicts (managedFields included)."""
        resource = self._resource(api_version, kind)
        listed = json_object(self.custom.request("GET", _path_of(api_version, resource, namespace)))
        items = _items(listed)
        for item in items:  # list items carry no type meta; callers apply them back
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items


def _path_of(api_version: str, resource: ServedResource, namespace: str | None, name: str | None = None) -> str:
    """The path of a discovered ``resource`` (its collection, or the object ``name``); ``namespace`` is ignored
    for a cluster-scoped one."""
    return object_path(api_root(api_version), resource.name, namespace if resource.namespaced else None, name)


_T = TypeVar("_T")


def _unless(status: int, call: Callable[[], _T]) -> _T | None:
    """``call()``, or None when the API answers ``status`` (404: it is gone; 409: it exists already)."""
    try:
        return call()
    except ApiException as exc:
        if exc.status == status:
            return None
        raise


def _optional_body(answer: object) -> JsonBody | None:
    """:func:`~opbroker.kubeclient.answers.json_object`, None passed on (the object does not exist)."""
    return None if answer is None else json_object(answer)


def _items(page: JsonObject) -> list[JsonBody]:
    """A list's objects (an item that is not an object is skipped)."""
    return [item for item in list_of(page.get("items")) if isinstance(item, dict)]


def event_body(
    obj: JsonObject, *, reason: str, message: str, warning: bool = False, now: datetime.datetime
) -> JsonBody:
    """The Event the controller records on ``obj`` at ``now`` (message cut to 1 KiB, as the API server limits
    it)."""
    meta = mapping_of(obj["metadata"])
    moment = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    # A cluster-scoped object's Events live in "default", as kube-controller-manager files them.
    return {
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace") or "default"},
        "involvedObject": {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": "opbroker-controller"},
        "firstTimestamp": moment,
        "lastTimestamp": moment,
        "count": 1,
    }
