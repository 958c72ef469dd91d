"""The controller's calls that went through the generated API classes, now plain JSON requests on the project's
transport (issue 45): each sends the request the generated client sent (method, path, query, body), with its
deadline, and reads the answer through a typed view; errors come back as the official exceptions.

Against a small HTTP server standing in for the API server (no cluster): it records each request and answers
from the test's table; the Lease is kept as the API server keeps it (versions, conflicts, 404).
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.controller.core.views import NodeView, PodView
from opbroker.controller.multicluster.sisters import SisterKube
from opbroker.controller.runtime import apiready, leadership
from opbroker.controller.runtime.access import Access, api_reviewer
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.kube import Kube
from opbroker.controller.runtime.leadership import Outcome
from opbroker.controller.servicecatalog import webhook
from opbroker.kubeclient import deadlines
from opbroker.kubeclient.astreams import AsyncTransport
from opbroker.kubeclient.lean import LeanApi
from opbroker.kubeclient.transport import Unreachable, transport_of


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str | None


Route = Callable[[Seen], tuple[int, Any]]


@dataclass
class FakeApi:
    """What the stand-in answers: ``routes[(method, path)]`` (a status and a JSON body, or a function of the
    request), 404 for anything else; ``seen``: every request, in order."""

    routes: dict[tuple[str, str], tuple[int, Any] | Route] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def answer(self, request: Seen) -> tuple[int, Any]:
        self.seen.append(request)
        route = self.routes.get((request.method, request.path))
        if route is None:
            return 404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"}
        return route(request) if callable(route) else route


@pytest.fixture
def fake() -> Iterator[tuple[FakeApi, client.ApiClient]]:
    api = FakeApi()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            sent = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            url = urlsplit(self.path)
            request = Seen(
                self.command,
                url.path,
                dict(parse_qsl(url.query)),
                json.loads(sent) if sent else None,
                self.headers.get("Content-Type"),
            )
            status, body = api.answer(request)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, *_: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    configuration = client.Configuration(host=f"http://127.0.0.1:{httpd.server_address[1]}")
    try:
        yield api, deadlines.bounded(configuration)
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- the door's cluster calls ----------------------------------------------------------------------------------


def test_a_namespace_is_created_with_the_body_the_generated_client_sent_and_an_existing_one_is_false(
    fake: tuple[FakeApi, client.ApiClient],
) -> None:
    api, api_client = fake
    api.routes[("POST", "/api/v1/namespaces")] = (201, {"metadata": {"name": "team-a"}})
    kube = Kube(api_client)
    assert kube.create_namespace("team-a") is True
    assert api.seen[-1].body == {"metadata": {"name": "team-a"}}
    api.routes[("POST", "/api/v1/namespaces")] = (409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"})
    assert kube.create_namespace("team-a") is False
    api.routes[("POST", "/api/v1/namespaces")] = (403, {"kind": "Status", "code": 403, "reason": "Forbidden"})
    with pytest.raises(ApiException) as refused:
        kube.create_namespace("team-a")
    assert refused.value.status == 403


def test_version_nodes_and_pods_are_read_through_views(fake: tuple[FakeApi, client.ApiClient]) -> None:
    api, api_client = fake
    api.routes[("GET", "/version")] = (200, {"gitVersion": "v1.31.2", "major": "1"})
    nodes = [
        {"metadata": {"name": "a"}, "status": {"capacity": {"cpu": "4", "memory": "8Gi"}, "allocatable": {"cpu": 3}}},
        {"metadata": {"name": "b"}, "status": {"capacity": "not a map"}},
        {"metadata": {"name": "c"}, "status": {"capacity": {"cpu": "2"}, "allocatable": {"cpu": "1500m"}}},
    ]
    api.routes[("GET", "/api/v1/nodes")] = (200, {"items": nodes})
    containers = [{"resources": {"requests": {"cpu": "250m"}}}, {"name": "no-requests"}, "not a container"]
    pods = [
        {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": containers}},
        {"metadata": {"name": "q", "namespace": "ns"}, "spec": {"containers": [{"resources": {"requests": 7}}]}},
    ]
    api.routes[("GET", "/api/v1/pods")] = (200, {"items": pods})
    kube = SisterKube(api_client)
    assert kube.server_version(timeout=2.0) == "v1.31.2"
    listed = kube.list_nodes(timeout=2.0)
    assert [n.meta.name for n in listed] == ["a", "b", "c"] and all(isinstance(n, NodeView) for n in listed)
    assert listed[1].capacity == {} and listed[1].allocatable == {}
    running = kube.list_pods(field_selector="status.phase!=Failed", timeout=2.0)
    assert all(isinstance(p, PodView) for p in running) and running[0].meta.namespace == "ns"
    assert running[0].requests == ({"cpu": "250m"}, {}) and running[1].requests == ({},)
    assert api.seen[-1].query == {"fieldSelector": "status.phase!=Failed"}

    capacity = kube.capacity()
    assert capacity is not None
    total, allocatable, requests = capacity
    assert (total["cpu"], allocatable["cpu"], requests["cpu"]) == (Decimal(6), Decimal("4.5"), Decimal("0.25"))
    assert total["memory"] == Decimal(8 * 2**30) and set(allocatable) == {"cpu"}


def test_no_nodes_is_no_capacity_and_pods_not_readable_count_nothing(fake: tuple[FakeApi, client.ApiClient]) -> None:
    api, api_client = fake
    api.routes[("GET", "/api/v1/nodes")] = (200, {"items": []})
    assert SisterKube(api_client).capacity() is None
    api.routes[("GET", "/api/v1/nodes")] = (200, {"items": [{"status": {"capacity": {"cpu": "1"}}}]})
    api.routes[("GET", "/api/v1/pods")] = (403, {"kind": "Status", "code": 403})
    assert SisterKube(api_client).capacity() == ({"cpu": 1}, {}, {})


LEASE = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lead"


# -- access reviews, the wait for the API, the webhook's configuration ------------------------------------------


def test_a_subject_access_review_sends_the_generated_clients_body_and_reads_allowed(
    fake: tuple[FakeApi, client.ApiClient],
) -> None:
    api, api_client = fake
    path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    api.routes[("POST", path)] = (201, {"status": {"allowed": True}})
    ask = api_reviewer(LeanApi(api_client))
    user = "system:serviceaccount:team-a:plans"
    assert ask(Access(user, "get", "", "secrets", "team-a")) is True
    assert api.seen[-1].body == {
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"],
            "resourceAttributes": {"verb": "get", "group": "", "resource": "secrets", "namespace": "team-a"},
        }
    }
    api.routes[("POST", path)] = (201, {"status": {"allowed": "yes"}})  # not a boolean: not allowed
    assert ask(Access(user, "list", "apps", "deployments", None)) is False
    assert "namespace" not in api.seen[-1].body["spec"]["resourceAttributes"]


def test_the_wait_for_the_api_names_a_forbidden_list_and_a_missing_resource(
    fake: tuple[FakeApi, client.ApiClient],
) -> None:
    api, api_client = fake
    resources = [{"name": "things", "kind": "Thing", "verbs": ["list", "watch"]}]
    api.routes[("GET", "/apis/g.io/v1")] = (200, {"resources": resources})
    api.routes[("GET", "/apis/g.io/v1/things")] = (403, {"kind": "Status", "code": 403, "message": "no"})
    wanted = [apiready.Wanted("g.io", "v1", "things"), apiready.Wanted("g.io", "v1", "others")]
    assert apiready.missing(api_client, wanted) == [
        "others.g.io/v1 (not in discovery)",
        "things.g.io/v1 (forbidden: the controller's RBAC lacks list on it)",
    ]
    assert api.seen[-1].query == {"limit": "1"}
    api.routes[("GET", "/apis/g.io/v1/things")] = (500, {"kind": "Status", "code": 500, "message": "etcd is down"})
    assert apiready.missing(api_client, wanted[:1]) == ["things.g.io/v1 (list HTTP 500: etcd is down)"]
    api.routes[("GET", "/apis/g.io/v1/things")] = (200, {"items": []})
    assert apiready.missing(api_client, wanted[:1]) == []
    assert apiready.missing(api_client, [apiready.Wanted("h.io", "v1", "x")]) == [
        "x.h.io/v1 (discovery HTTP 404: not found)"
    ]


def test_the_wait_for_the_api_reports_a_server_that_does_not_answer() -> None:
    closed = deadlines.bounded(client.Configuration(host="http://127.0.0.1:9"))
    closed.configuration.retries = 0
    (problem,) = apiready.missing(closed, [apiready.Wanted("g.io", "v1", "things")])
    assert problem.startswith("the API server at http://127.0.0.1:9 does not answer")


def test_the_webhook_configuration_is_read_and_applied_as_before(fake: tuple[FakeApi, client.ApiClient]) -> None:
    api, api_client = fake
    path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/hooks"
    assert webhook.registered_ca(api_client, "hooks") is None
    hooks = [{"name": "other"}, {"name": webhook.webhooks.WEBHOOK_NAME, "clientConfig": {"caBundle": "Y2E="}}]
    api.routes[("GET", path)] = (200, {"webhooks": hooks})
    assert webhook.registered_ca(api_client, "hooks") == b"ca"
    api.routes[("PATCH", path)] = (200, {})
    webhook.register_ca(api_client, "hooks", b"new")
    applied = api.seen[-1]
    assert applied.method == "PATCH" and applied.content_type == "application/apply-patch+yaml"
    assert applied.query == {"fieldManager": webhook.FIELD_MANAGER, "force": "true"}
    assert applied.body["webhooks"][0]["clientConfig"] == {"caBundle": "bmV3"}
    count = len(api.seen)
    webhook.register_ca(api_client, "hooks", b"ca")  # carried already: read, nothing written
    assert [s.method for s in api.seen[count:]] == ["GET"]


# -- the leader's Lease --------------------------------------------------------------------------------------


@dataclass
class LeaseStore:
    """The Lease as the API server keeps it: created once, replaced only at its current version."""

    lease: dict[str, Any] | None = None
    version: int = 0

    def get(self, _request: Seen) -> tuple[int, Any]:
        if self.lease is None:
            return 404, {"kind": "Status", "code": 404, "reason": "NotFound"}
        return 200, self.lease

    def create(self, request: Seen) -> tuple[int, Any]:
        if self.lease is not None:
            return 409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"}
        return 201, self._keep(request.body)

    def replace(self, request: Seen) -> tuple[int, Any]:
        # The API server's optimistic concurrency: a write names the version it read.
        if self.lease is None or request.body["metadata"].get("resourceVersion") != str(self.version):
            return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
        return 200, self._keep(request.body)

    def _keep(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        return self.lease


def lock(api_client: client.ApiClient, identity: str, clock: FakeClock) -> leadership.LeaseLock:
    return leadership.LeaseLock(
        AsyncTransport(transport_of(api_client)), "ns", "lead", identity, lease_seconds=15, clock=clock
    )


def test_the_lock_creates_renews_and_respects_the_lease(fake: tuple[FakeApi, client.ApiClient]) -> None:
    api, api_client = fake
    store = LeaseStore()
    api.routes[("GET", LEASE)] = store.get
    api.routes[("POST", "/apis/coordination.k8s.io/v1/namespaces/ns/leases")] = store.create
    api.routes[("PUT", LEASE)] = store.replace
    clock = FakeClock()
    first, second = lock(api_client, "first", clock), lock(api_client, "second", clock)

    async def scenario() -> None:
        assert await first.attempt() is Outcome.LEADING  # 404, then created
        assert store.lease is not None and store.lease["metadata"] == {
            "name": "lead",
            "namespace": "ns",
            "resourceVersion": "1",
        }
        spec = store.lease["spec"]
        assert spec["holderIdentity"] == "first" and spec["leaseDurationSeconds"] == 15
        assert spec["leaseTransitions"] == 0
        assert spec["renewTime"] == "2026-01-01T00:00:00.000000Z" == spec["acquireTime"]
        assert await second.attempt() is Outcome.HELD and second.holder == "first"  # held, not expired: no write
        assert [s.method for s in api.seen] == ["GET", "POST", "GET"]

        clock.advance(2.5)
        assert await first.attempt() is Outcome.LEADING  # renewed at the version read, acquireTime kept
        assert api.seen[-1].method == "PUT" and api.seen[-1].body["metadata"]["resourceVersion"] == "1"
        assert store.lease["spec"]["acquireTime"] == spec["acquireTime"] and store.version == 2
        assert store.lease["spec"]["renewTime"] == "2026-01-01T00:00:02.500000Z"

        # The standby counts the lease's duration from when it first saw the current record, on its own clock (the
        # stored times are the holder's clock's): here at 2.5 s.
        assert await second.attempt() is Outcome.HELD
        clock.advance(14)
        assert await second.attempt() is Outcome.HELD  # unchanged for 14 s of its sight
        clock.advance(1.5)
        assert await second.attempt() is Outcome.LEADING  # not renewed for a whole lease: taken, a transition
        assert store.lease["spec"]["holderIdentity"] == "second" and store.lease["spec"]["leaseTransitions"] == 1
        assert await first.attempt() is Outcome.HELD and first.holder == "second"  # the old leader sees another

        api.routes[("GET", LEASE)] = (500, {"kind": "Status", "code": 500})
        assert await second.attempt() is Outcome.FAILED  # an error read is a failed attempt, not a creation
        assert api.seen[-1].method == "GET"
        await first.close()
        await second.close()

    asyncio.run(scenario())


def test_of_two_takeovers_at_once_the_api_server_lets_one_write(fake: tuple[FakeApi, client.ApiClient]) -> None:
    api, api_client = fake
    store = LeaseStore()
    api.routes[("GET", LEASE)] = store.get
    api.routes[("PUT", LEASE)] = store.replace
    store._keep({"metadata": {"name": "lead"}, "spec": {"leaseDurationSeconds": 15, "leaseTransitions": 3}})
    clock = FakeClock()
    first, second = lock(api_client, "first", clock), lock(api_client, "second", clock)
    assert store.lease is not None
    released = (200, json.loads(json.dumps(store.lease)))
    api.routes[("GET", LEASE)] = released  # both read the released lease (version 1) before either writes

    async def scenario() -> None:
        assert await first.attempt() is Outcome.LEADING  # no holder: taken at once, a transition counted
        assert store.lease is not None and store.lease["spec"]["leaseTransitions"] == 4
        assert await second.attempt() is Outcome.FAILED  # its write carried the version it read: 409
        assert store.lease["spec"]["holderIdentity"] == "first"
        await first.close()
        await second.close()

    asyncio.run(scenario())


def test_a_lease_is_released_by_its_holder_only_and_at_the_version_read(fake: tuple[FakeApi, client.ApiClient]) -> None:
    api, api_client = fake
    held = {
        "metadata": {"name": "lead", "resourceVersion": "5"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
    }
    api.routes[("GET", LEASE)] = (200, held)
    api.routes[("PUT", LEASE)] = (200, held)
    clock = FakeClock()

    async def scenario() -> None:
        assert await lock(api_client, "someone-else", clock).release() is False
        assert [s.method for s in api.seen] == ["GET"]
        assert await lock(api_client, "me", clock).release() is True
        written = api.seen[-1]
        assert written.method == "PUT" and written.body == {
            "metadata": {"name": "lead", "resourceVersion": "5"},
            "spec": {"leaseDurationSeconds": 15},
        }
        api.routes[("PUT", LEASE)] = (409, {"kind": "Status", "code": 409})
        with pytest.raises(ApiException):
            await lock(api_client, "me", clock).release()

    asyncio.run(scenario())


def test_an_unreachable_api_server_is_a_failed_attempt() -> None:
    closed = deadlines.bounded(client.Configuration(host="http://127.0.0.1:9"))
    closed.configuration.retries = 0
    unreachable = leadership.LeaseLock(
        AsyncTransport(transport_of(closed)), "ns", "lead", "me", lease_seconds=15, clock=FakeClock()
    )

    async def scenario() -> None:
        with pytest.raises(Unreachable):
            await unreachable.release()
        assert await unreachable.attempt() is Outcome.FAILED
        await unreachable.close()

    asyncio.run(scenario())
