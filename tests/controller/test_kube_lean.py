"""The lean requests (``kubeclient.lean``): the hot calls as plain JSON, past the generated client's machinery.

Aspects: the request sent (method, path, query, content type, credentials, the client's default headers such as
``Impersonate-User``, the deadline) and the answer or error handed back, as the generated client would (unit, on
a stand-in for the connection pool under the project's transport); and on the real API server, every door of the
controller that now goes through it — custom objects, their status, guarded deletes, generic objects by
server-side apply, Secrets, Events, a watch — answering what the generated client reads back, and an
impersonating door refused as its user.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import httpcore
import httpx
import pytest
from kubernetes import client
from kubernetes.client import exceptions

from opbroker.api.meta import ResourceRef
from opbroker.controller.kinds import BINDINGS
from opbroker.controller.runtime.kube import Kube, Refused
from opbroker.kubeclient import deadlines, transport
from opbroker.kubeclient.informer import BlockingSource, Collection, blocking_events
from opbroker.kubeclient.lean import LeanCustomObjects, object_path
from tests.controller.example_kind.view import GREETINGS
from tests.controller.test_example_kind import install_crd

# -- the request sent, the answer read (no cluster) ---------------------------------------------------------


class Recording:
    """A bounded client's lean requests, recorded and answered from a list, never sent (a stand-in for the
    connection pool under the project's transport)."""

    def __init__(self, answers_: list[tuple[int, bytes]]) -> None:
        configuration = client.Configuration(host="https://api.example:6443")
        configuration.api_key = {"authorization": "token-1"}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        self.api = deadlines.BoundedApiClient(configuration)
        self.answers = answers_
        self.sent: list[dict[str, Any]] = []

    def lean(self) -> LeanCustomObjects:
        return LeanCustomObjects(self.api, transport=transport.transport_of(self.api, network=self))

    def handle_request(self, request: httpcore.Request) -> httpcore.Response:
        timeout = request.extensions["timeout"]
        body = b"".join(request.stream)  # type: ignore[union-attr]
        self.sent.append(
            {
                "method": request.method.decode(),
                "url": bytes(request.url).decode(),
                "headers": httpx.Headers(request.headers),
                "body": json.loads(body) if body else None,
                "timeout": (timeout["connect"], timeout["read"]),
            }
        )
        status, answer = self.answers.pop(0)
        return httpcore.Response(status, headers=[(b"Content-Type", b"application/json")], content=answer)


def test_a_status_patch_is_one_merge_patch_with_the_credentials_and_default_headers() -> None:
    api = Recording([(200, b'{"kind": "Thing", "status": {"state": "ok"}}')])
    lean = api.lean()
    api.api.set_default_header("Impersonate-User", "system:serviceaccount:t:plan")  # type: ignore[no-untyped-call]
    answer = lean.patch_namespaced_custom_object_status(
        "g.io", "v1", "ns 1", "things", "a/b", {"status": {"state": "ok"}}
    )
    assert answer == {"kind": "Thing", "status": {"state": "ok"}}
    (sent,) = api.sent
    assert (sent["method"], sent["url"]) == (
        "PATCH",
        "https://api.example:6443/apis/g.io/v1/namespaces/ns%201/things/a%2Fb/status",
    )
    assert sent["headers"]["Content-Type"] == "application/merge-patch+json"
    assert sent["headers"]["Accept"] == "application/json"
    assert sent["headers"]["authorization"] == "Bearer token-1"
    assert sent["headers"]["Impersonate-User"] == "system:serviceaccount:t:plan"
    assert sent["headers"]["User-Agent"] == api.api.user_agent
    assert "Accept-Encoding" not in sent["headers"]  # no compressed answers asked for, as the official client
    assert sent["body"] == {"status": {"state": "ok"}}
    assert sent["timeout"] == (deadlines.CONNECT_SECONDS, deadlines.REQUEST_SECONDS)


def test_the_generated_clients_arguments_become_the_apis_query_and_a_list_is_a_json_patch() -> None:
    api = Recording([(200, b'{"items": []}'), (200, b"{}"), (200, b"{}")])
    lean = api.lean()
    lean.list_cluster_custom_object(
        "g.io", "v1", "things", label_selector="a=b", limit=5, _continue="tok", _headers={"Accept": "x/y"}
    )
    lean.patch_cluster_custom_object("g.io", "v1", "things", "n", [{"op": "test", "path": "/a", "value": 1}])
    lean.delete_namespaced_custom_object("g.io", "v1", "ns", "things", "n", body={"preconditions": {"uid": "u"}})
    listing, patch, delete = api.sent
    assert listing["url"] == "https://api.example:6443/apis/g.io/v1/things?labelSelector=a%3Db&limit=5&continue=tok"
    assert listing["headers"]["Accept"] == "x/y" and "Content-Type" not in listing["headers"]
    assert patch["headers"]["Content-Type"] == "application/json-patch+json"
    assert (delete["method"], delete["body"]) == ("DELETE", {"preconditions": {"uid": "u"}})
    with pytest.raises(TypeError, match="labelselector"):
        lean.list_cluster_custom_object("g.io", "v1", "things", labelselector="a=b")  # a typo is not sent silently
    with pytest.raises(TypeError, match="Impersonate-User"):
        lean.list_cluster_custom_object("g.io", "v1", "things", _headers={"Impersonate-User": "x"})


def test_an_error_answer_raises_the_generated_clients_exception_with_its_body() -> None:
    status = {"kind": "Status", "code": 409, "reason": "Conflict", "message": "the object has been modified"}
    api = Recording([(409, json.dumps(status).encode()), (404, b"{}")])
    lean = api.lean()
    with pytest.raises(exceptions.ConflictException) as conflict:
        lean.patch_namespaced_custom_object_status("g.io", "v1", "ns", "things", "n", {"status": {}})
    assert conflict.value.status == 409 and json.loads(conflict.value.body) == status
    with pytest.raises(exceptions.NotFoundException):
        lean.get_namespaced_custom_object("g.io", "v1", "ns", "things", "n")


def test_paths_of_core_and_grouped_collections_and_objects() -> None:
    assert object_path("/api/v1", "secrets", "ns", "s") == "/api/v1/namespaces/ns/secrets/s"
    assert object_path("/api/v1", "namespaces", None, "ns") == "/api/v1/namespaces/ns"
    assert object_path("/apis/g/v1", "things", None) == "/apis/g/v1/things"
    assert object_path("/apis/g/v1", "things", "ns", "n", "status") == "/apis/g/v1/namespaces/ns/things/n/status"


# -- every door on the real API server ---------------------------------------------------------------------


def _greeting(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": GREETINGS.api_version,
        "kind": "Greeting",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"name": name},
    }


def test_the_controllers_doors_answer_what_the_generated_client_reads(
    api_client: client.ApiClient, namespace: str
) -> None:
    # A kind of the tests' own (the example kind's Greeting): no controller of the session reconciles it, so this
    # test is the only writer (an SFServiceBinding was deleted by the session's controller, when an earlier test had
    # started it, before it could be read back).
    install_crd(api_client)
    kube = Kube(api_client)
    generated = client.CustomObjectsApi(api_client)
    name = f"g-{uuid.uuid4().hex[:6]}"
    created = kube.create_custom(GREETINGS, _greeting(namespace, name))
    read_back = generated.get_namespaced_custom_object(
        GREETINGS.group, GREETINGS.version, namespace, GREETINGS.plural, name
    )
    assert created == read_back
    assert kube.get_custom(GREETINGS, namespace, name, fresh=True) == read_back

    patched = kube.patch_custom_status(
        GREETINGS, namespace, name, {"state": "succeeded"}, resource_version=created["metadata"]["resourceVersion"]
    )
    assert patched is not None and patched["status"]["state"] == "succeeded"
    with pytest.raises(exceptions.ApiException) as stale:  # the guard: the object moved on since that version
        kube.patch_custom_status(
            GREETINGS, namespace, name, {"state": "failed"}, resource_version=created["metadata"]["resourceVersion"]
        )
    assert stale.value.status == 409
    assert kube.patch_custom_status(GREETINGS, namespace, "absent", {"state": "x"}) is None

    listed = kube.list_custom(GREETINGS, namespace)
    assert [item["metadata"]["name"] for item in listed] == [name]
    assert kube.uids_of(GREETINGS)[(namespace, name)] == created["metadata"]["uid"]

    assert kube.delete_custom(GREETINGS, namespace, name, uid="another-incarnation") is False
    assert kube.get_custom(GREETINGS, namespace, name, fresh=True) is not None, "a wrong uid deletes nothing"
    assert kube.delete_custom(GREETINGS, namespace, name, uid=created["metadata"]["uid"]) is True
    assert kube.delete_custom(GREETINGS, namespace, name) is False


def test_generic_objects_secrets_and_events_through_the_lean_requests(
    api_client: client.ApiClient, namespace: str
) -> None:
    kube = Kube(api_client)
    core = client.CoreV1Api(api_client)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": namespace}}
    applied = kube.apply({**config_map, "data": {"a": "1"}})
    assert applied["data"] == {"a": "1"}
    assert core.read_namespaced_config_map("cm", namespace).data == {"a": "1"}
    ref = ResourceRef(api_version="v1", kind="ConfigMap", name="cm", namespace=namespace)
    assert kube.merge_patch(ref, {"data": {"b": "2"}})["data"] == {"a": "1", "b": "2"}  # type: ignore[index]
    assert kube.get(ref, fresh=True)["data"] == {"a": "1", "b": "2"}  # type: ignore[index]
    assert kube.create({**config_map, "data": {}}) is None, "it exists: the caller adopts it"
    with pytest.raises(exceptions.ApiException) as moved:  # a guarded delete of a version that is not the latest
        kube.delete(ref, resource_version=applied["metadata"]["resourceVersion"])
    assert moved.value.status == 409
    assert kube.delete(ref) is True and kube.delete(ref) is False
    assert kube.get(ref, fresh=True) is None

    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": namespace}}
    written = kube.apply_secret({**secret, "stringData": {"password": "p"}})
    assert kube.read_secret(namespace, "s") == written
    assert "s" in [item["metadata"]["name"] for item in kube.list_secrets(namespace, label_selector="")]
    (shown,) = [
        i for i in kube.list_secrets(namespace, label_selector="", metadata_only=True) if i["metadata"]["name"] == "s"
    ]
    assert "data" not in shown and shown["metadata"]["uid"] == written["metadata"]["uid"]  # no body sent
    assert kube.delete_secret(namespace, "s", uid="not-its-uid") is False
    assert kube.delete_secret(namespace, "s", uid=written["metadata"]["uid"]) is True
    assert kube.read_secret(namespace, "s") is None
    assert kube.read_namespace(namespace)["metadata"]["name"] == namespace  # type: ignore[index]
    assert kube.read_namespace(f"{namespace}-absent") is None

    kube.emit_event(written, reason="Written", message="m" * 2000)
    (event,) = core.list_namespaced_event(namespace, field_selector="reason=Written").items
    assert event.involved_object.name == "s" and len(event.message) == 1024


def test_a_watch_streams_through_the_lean_client(api_client: client.ApiClient, namespace: str) -> None:
    install_crd(api_client)  # a kind no controller of the session writes (see the doors' test)
    lean = LeanCustomObjects(api_client)
    listed = lean.list_namespaced_custom_object(GREETINGS.group, GREETINGS.version, namespace, GREETINGS.plural)
    lean.create_namespaced_custom_object(
        GREETINGS.group, GREETINGS.version, namespace, GREETINGS.plural, _greeting(namespace, "w")
    )
    watched = Collection(GREETINGS.api_version, GREETINGS.plural, namespace=namespace)
    stream = BlockingSource(lean).watch(watched, listed["metadata"]["resourceVersion"], 10)
    event_type, obj = next(blocking_events(stream))
    stream.abort()
    first = {"type": event_type, "object": obj}
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "w")


def test_the_transport_on_the_real_api_server(api_client: client.ApiClient, namespace: str) -> None:
    """A watch's lines, bounded in size (one event over the bound is refused before it is parsed), an abort from
    another thread ending a blocked read at once (not at the watch's end), and errors as the official exceptions:
    404, 409, and 410 for a watch from a version long gone (the API server's ERROR event, or its answer)."""
    install_crd(api_client)  # a kind no controller of the session writes (see the doors' test)
    lean = LeanCustomObjects(deadlines.bounded(api_client.configuration))
    group, version, plural = GREETINGS.group, GREETINGS.version, GREETINGS.plural
    listed = lean.list_namespaced_custom_object(group, version, namespace, plural)
    since = listed["metadata"]["resourceVersion"]
    lean.create_namespaced_custom_object(group, version, namespace, plural, _greeting(namespace, "t"))
    with pytest.raises(exceptions.ConflictException):
        lean.create_namespaced_custom_object(group, version, namespace, plural, _greeting(namespace, "t"))
    with pytest.raises(exceptions.NotFoundException) as missing:
        lean.get_namespaced_custom_object(group, version, namespace, plural, "absent")
    assert json.loads(missing.value.body)["reason"] == "NotFound"

    def watch_from(version_: str, **query: str) -> transport.StreamedAnswer:
        answer: transport.StreamedAnswer = lean.list_namespaced_custom_object(
            group,
            version,
            namespace,
            plural,
            watch=True,
            resource_version=version_,
            timeout_seconds=30,
            _preload_content=False,
            **query,
        )
        return answer

    stream = watch_from(since)
    event = json.loads(next(stream.lines()))
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "t")
    stream.close()
    # The blocked read is on a name nobody writes.
    quiet = watch_from(since, field_selector="metadata.name=quiet")
    lines = quiet.lines()
    threading.Timer(0.3, quiet.abort).start()
    started = time.monotonic()
    assert list(lines) == []
    assert time.monotonic() - started < 5.0, "ended by the abort, not by the watch's 30 s"

    with pytest.raises(ValueError, match="over 100 bytes"):
        list(watch_from(since).lines(limit=100))  # the object's event is well over 100 bytes

    try:
        gone = json.loads(next(watch_from("1").lines()))
        assert (gone["type"], gone["object"]["code"]) == ("ERROR", 410)
    except exceptions.ApiException as exc:
        assert exc.status == 410


def test_an_acting_door_is_refused_as_its_user(api_client: client.ApiClient, namespace: str) -> None:
    """The impersonating door's header rides on every lean request: a user with no rights is refused (and the
    refusal names that user), where the controller's own door may write."""
    door = Kube(api_client).acting_as(f"system:serviceaccount:{namespace}:nobody")
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x", "namespace": namespace}}
    with pytest.raises(Refused) as refused:
        door.apply_secret({**secret, "stringData": {"password": "never-echoed"}})
    assert refused.value.status == 403 and "nobody" in str(refused.value)
    assert "never-echoed" not in str(refused.value)
    with pytest.raises(exceptions.ApiException) as denied:
        door.custom.get_namespaced_custom_object(BINDINGS.group, BINDINGS.version, namespace, "sfservicebindings", "w")
    assert denied.value.status == 403
    assert kube_secret_names(api_client, namespace).isdisjoint({"x"}), "nothing was written"


def kube_secret_names(api_client: client.ApiClient, namespace: str) -> set[str]:
    return {item.metadata.name for item in client.CoreV1Api(api_client).list_namespaced_secret(namespace).items}
