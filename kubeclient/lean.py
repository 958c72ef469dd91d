"""The hot API calls as plain JSON requests, past the generated client's per-call machinery.

Why: the official client (kubernetes 37, openapi-generator 7) checks every call's arguments with pydantic
(``validate_call``), walks headers, path and query through its model serialiser, matches the answer against
its response-type table and, on the dynamic client, wraps each answer in ``ResourceInstance``/``ResourceField``
objects that ``to_dict()`` walks back. opbroker sends plain dicts and wants plain dicts back; that machinery
cost about a third of the controller's CPU per provisioned instance (issue 31, py-spy) and much of the broker's.

The requests go through the project's own transport (:mod:`opbroker.kubeclient.transport`, over httpx), built
from the official client's configuration: its server, TLS and credentials (and their refresh hook), its default
headers (User-Agent; an acting door's ``Impersonate-User``), and for a bounded client
(:mod:`opbroker.kubeclient.deadlines`) its deadlines and answer report; every non-2xx answer raises the
:class:`~kubernetes.client.exceptions.ApiException` subclass the client raises (``NotFoundException`` for a 404,
…) with the answer's body, so callers handle errors as before. Nothing private of the official client or of
urllib3 is used.

:class:`LeanCustomObjects` has the names and arguments of the ``CustomObjectsApi`` methods opbroker calls, so it
replaces that client where it is built (and the client's ``watch`` streams through it unchanged).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable
from typing import Any

from kubernetes import client

from opbroker.kubeclient import jsontext
from opbroker.kubeclient.transport import Transport, transport_of

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
"""Server-side apply's content type; its body is sent as JSON (JSON is YAML)."""

#: ``PartialObjectMetadataList``: every object's metadata, without its data (metadata-only listings).
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
#: A watch of the same (each event's object is its ``PartialObjectMetadata``).
METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
#: Objects per page of a metadata-only listing: each page is parsed whole (an object's metadata, managedFields
#: included, is 1 to 2 KiB parsed) and what Python's allocator takes for it stays with the process, so a restart
#: over 10 000 unrelated Secrets listed 5 000 at a time grew by 25 MiB for 2.7 MiB held; 500 keep the peak
#: near 1 MiB for 20 requests instead of 2.
METADATA_PAGE = 500


def api_root(api_version: str) -> str:
    """``/api/v1`` for the core group, ``/apis/<group>/<version>`` for any other."""
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


def object_path(
    root: str, plural: str, namespace: str | None = None, name: str | None = None, subresource: str | None = None
) -> str:
    """The path of a collection (no ``name``) or of one object, in ``namespace`` when given."""
    path = root
    if namespace:
        path += "/namespaces/" + urllib.parse.quote(namespace, safe="")
    path += "/" + plural
    if name is not None:
        path += "/" + urllib.parse.quote(name, safe="")
        if subresource:
            path += "/" + subresource
    return path


def query_of(query: Iterable[tuple[str, Any]]) -> tuple[list[tuple[str, str]], bool, float | None]:
    """A request's query as sent (pairs whose value is None left out, booleans as ``true``/``false``), whether it
    is a watch's and the server-side seconds it asks for (what the read deadline is measured from)."""
    pairs = [(key, _query_value(value)) for key, value in query if value is not None]
    watching = any(key == "watch" and value in ("true", "1") for key, value in pairs)
    seconds = next((value for key, value in pairs if key == "timeoutSeconds"), None)
    return pairs, watching, float(seconds) if seconds and seconds.isdigit() else None


class LeanApi:
    """Plain JSON requests to the server of an official ``ApiClient``, through the project's own transport (see
    the module docstring)."""

    def __init__(self, api_client: client.ApiClient, *, transport: Transport | None = None) -> None:
        self.api_client = api_client
        self.transport = transport if transport is not None else transport_of(api_client)

    def close(self) -> None:
        """Close the transport's connections."""
        self.transport.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
        stream: bool = False,
        timeout: Any = None,
    ) -> Any:
        """The answer's decoded JSON (``stream``: the open :class:`~opbroker.kubeclient.transport.StreamedAnswer`,
        for a watch to read line by line).

        ``query`` pairs whose value is None are left out; booleans are sent as ``true``/``false``. A body that is
        not plain JSON (a client model such as ``V1DeleteOptions``) goes through the client's serialiser.
        """
        headers = {"Accept": accept}
        sent: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type
            if not isinstance(body, dict | list):
                body = self.api_client.sanitize_for_serialization(body)  # type: ignore[no-untyped-call]
            sent = jsontext.dumps(body)
        pairs, watching, server_seconds = query_of(query)
        if stream:
            return self.transport.stream(
                method,
                path,
                query=pairs,
                headers=headers,
                timeout=timeout,
                watch=watching,
                server_seconds=server_seconds,
            )
        answer = self.transport.request(
            method,
            path,
            query=pairs,
            body=sent,
            headers=headers,
            timeout=timeout,
            watch=watching,
            server_seconds=server_seconds,
        )
        return jsontext.loads(answer.content) if answer.content else None

    def server_side_apply(self, path: str, body: dict[str, Any], *, field_manager: str) -> Any:
        """Server-side apply of ``body`` at ``path`` as ``field_manager``, taking over fields others own
        (``force``): the object as written."""
        query = (("fieldManager", field_manager), ("force", True))
        return self.request("PATCH", path, query=query, body=body, content_type=APPLY_PATCH)


class LeanCustomObjects(LeanApi):
    """``CustomObjectsApi``'s methods that opbroker calls, same names and arguments, answers as plain JSON.

    Patches of a dict are merge patches (as the generated client sends them), of a list JSON patches. The
    generated client's per-call options are honoured where opbroker passes them: ``_request_timeout``,
    ``_headers`` (an ``Accept`` for metadata-only listings), ``_content_type``, and ``_preload_content=False``
    (the open :class:`~opbroker.kubeclient.transport.StreamedAnswer`, which the client's ``watch`` reads).
    """

    # -- reads -------------------------------------------------------------------------------------------

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **options: Any
    ) -> Any:
        return self._call("GET", _custom(group, version, plural, namespace, name), options)

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str, **options: Any) -> Any:
        return self._call("GET", _custom(group, version, plural, None, name), options)

    def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, **options: Any
    ) -> Any:
        return self._call("GET", _custom(group, version, plural, namespace), options)

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **options: Any) -> Any:
        return self._call("GET", _custom(group, version, plural), options)

    # -- writes ------------------------------------------------------------------------------------------

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: Any, **options: Any
    ) -> Any:
        return self._call("POST", _custom(group, version, plural, namespace), options, body)

    def create_cluster_custom_object(self, group: str, version: str, plural: str, body: Any, **options: Any) -> Any:
        return self._call("POST", _custom(group, version, plural), options, body)

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any, **options: Any
    ) -> Any:
        return self._call("PATCH", _custom(group, version, plural, namespace, name), options, body)

    def patch_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, body: Any, **options: Any
    ) -> Any:
        return self._call("PATCH", _custom(group, version, plural, None, name), options, body)

    def patch_namespaced_custom_object_status(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any, **options: Any
    ) -> Any:
        return self._call("PATCH", _custom(group, version, plural, namespace, name, "status"), options, body)

    def patch_cluster_custom_object_status(
        self, group: str, version: str, plural: str, name: str, body: Any, **options: Any
    ) -> Any:
        return self._call("PATCH", _custom(group, version, plural, None, name, "status"), options, body)

    def delete_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **options: Any
    ) -> Any:
        body = options.pop("body", None)
        return self._call("DELETE", _custom(group, version, plural, namespace, name), options, body)

    def delete_cluster_custom_object(self, group: str, version: str, plural: str, name: str, **options: Any) -> Any:
        body = options.pop("body", None)
        return self._call("DELETE", _custom(group, version, plural, None, name), options, body)

    # -- the generated client's options ------------------------------------------------------------------

    def _call(self, method: str, path: str, options: dict[str, Any], body: Any = None) -> Any:
        timeout = options.pop("_request_timeout", None)
        headers = options.pop("_headers", None) or {}
        content_type = options.pop("_content_type", None)
        stream = options.pop("_preload_content", True) is False
        if content_type is None:
            content_type = (JSON_PATCH if isinstance(body, list) else MERGE_PATCH) if method == "PATCH" else JSON
        unknown = set(headers) - {"Accept"}
        if unknown:
            raise TypeError(f"headers {sorted(unknown)} are not sent by the lean client")
        query = [(_CAMEL.get(key, key), value) for key, value in options.items()]
        unknown = {key for key, _ in query} - _KNOWN_QUERY
        if unknown:
            raise TypeError(f"query arguments {sorted(unknown)} are not known to the lean client")
        return self.request(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            accept=headers.get("Accept", JSON),
            stream=stream,
            timeout=timeout,
        )


#: The generated client's snake_case query arguments, as the API names them.
_CAMEL = {
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "resource_version": "resourceVersion",
    "resource_version_match": "resourceVersionMatch",
    "timeout_seconds": "timeoutSeconds",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "_continue": "continue",
    "field_manager": "fieldManager",
    "field_validation": "fieldValidation",
    "dry_run": "dryRun",
    "propagation_policy": "propagationPolicy",
    "grace_period_seconds": "gracePeriodSeconds",
    "send_initial_events": "sendInitialEvents",
}
_KNOWN_QUERY = set(_CAMEL.values()) | {"limit", "watch", "force", "pretty"}


def _custom(
    group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None, sub: str = ""
) -> str:
    return object_path(f"/apis/{group}/{version}", plural, namespace, name, sub or None)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
