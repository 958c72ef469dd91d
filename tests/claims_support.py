"""Helpers of the claims tests: tiny health-check targets on 127.0.0.1 and Primaza manifests.

The controller under test runs on this machine, so it reaches these servers exactly as it would reach a
registered service.
"""

from __future__ import annotations

import base64
import http.server
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any


class TcpTarget:
    """A listening TCP port that can be closed and reopened on the same port (a flapping service)."""

    def __init__(self) -> None:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port: int = probe.getsockname()[1]
        probe.close()
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def up(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(16)
        self._socket = sock

        def accept() -> None:
            while True:
                try:
                    connection, _ = sock.accept()
                except OSError:
                    return
                connection.close()

        self._thread = threading.Thread(target=accept, daemon=True)
        self._thread.start()

    def down(self) -> None:
        if self._socket is not None:
            with suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)
            self._socket.close()
            self._socket = None
        if self._thread is not None:
            self._thread.join(5)


@contextmanager
def tcp_target() -> Iterator[TcpTarget]:
    target = TcpTarget()
    target.up()
    try:
        yield target
    finally:
        target.down()


class HttpTarget:
    """An HTTP server whose answer the test sets; checks basic auth when credentials are given."""

    def __init__(self, *, username: str | None = None, password: str | None = None, delay: float = 0.0) -> None:
        self.status = 200
        self.delay = delay
        self.requests = 0
        self.authorized = 0
        expected = (
            "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode() if username is not None else None
        )
        target = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                target.requests += 1
                if target.delay:
                    threading.Event().wait(target.delay)
                if expected is not None and self.headers.get("Authorization") != expected:
                    self.send_response(401)
                else:
                    if expected is not None:
                        target.authorized += 1
                    self.send_response(target.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def http_target(**kwargs: Any) -> Iterator[HttpTarget]:
    target = HttpTarget(**kwargs)
    try:
        yield target
    finally:
        target.close()


def registered_service(
    name: str,
    *,
    identity: dict[str, str] | None = None,
    endpoints: dict[str, str | tuple[str, str]] | None = None,
    sla: str | None = None,
    environments: list[str] | None = None,
    healthcheck: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A RegisteredService manifest; an endpoint given as (secret, key) reads from a Secret."""
    identity = identity or {"type": "postgresql", "provider": "aws"}
    endpoints = endpoints or {"host": f"{name}.example", "port": "5432", "password": ("db-credentials", "password")}
    definition: list[dict[str, Any]] = []
    for key, value in endpoints.items():
        if isinstance(value, tuple):
            definition.append({"name": key, "valueFromSecret": {"name": value[0], "key": value[1]}})
        else:
            definition.append({"name": key, "value": value})
    spec: dict[str, Any] = {
        "serviceClassIdentity": [{"name": k, "value": v} for k, v in identity.items()],
        "serviceEndpointDefinition": definition,
    }
    if sla:
        spec["sla"] = sla
    if environments is not None:
        spec["constraints"] = {"environments": environments}
    if healthcheck is not None:
        spec["healthcheck"] = healthcheck
    return {"apiVersion": "primaza.io/v1alpha1", "kind": "RegisteredService", "metadata": {"name": name}, "spec": spec}


def service_claim(
    name: str,
    *,
    identity: dict[str, str] | None = None,
    keys: list[str] | None = None,
    environment: str = "dev",
    application: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serviceClassIdentity": [{"name": k, "value": v} for k, v in (identity or {"type": "postgresql"}).items()],
        "serviceEndpointDefinitionKeys": keys or ["host", "port", "password"],
        "environmentTag": environment,
    }
    if application is not None:
        spec["application"] = application
    return {"apiVersion": "primaza.io/v1alpha1", "kind": "ServiceClaim", "metadata": {"name": name}, "spec": spec}


# -- API helpers ---------------------------------------------------------------------------------------

GROUP, VERSION = "primaza.io", "v1alpha1"
PLURALS = {
    "RegisteredService": "registeredservices",
    "ServiceClaim": "serviceclaims",
    "ServiceCatalog": "servicecatalogs",
}


def create(api: Any, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    from kubernetes import client

    created: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURALS[manifest["kind"]], manifest
    )
    return created


def get(api: Any, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURALS[kind], name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def status(api: Any, namespace: str, kind: str, name: str) -> dict[str, Any]:
    found = get(api, namespace, kind, name)
    return dict((found or {}).get("status") or {})


def patch_spec(api: Any, namespace: str, kind: str, name: str, spec: dict[str, Any]) -> None:
    from kubernetes import client

    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURALS[kind], name, {"spec": spec}
    )


def delete(api: Any, namespace: str, kind: str, name: str) -> None:
    from kubernetes import client

    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[kind], name)


def transitions(api: Any, namespace: str, name: str) -> set[str]:
    """The ``A -> B`` state changes recorded as Events on an object."""
    from kubernetes import client

    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return {e.message.split(":")[0] for e in events.items if " -> " in (e.message or "")}


def event_reasons(api: Any, namespace: str, name: str) -> list[str]:
    from kubernetes import client

    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return [e.reason for e in events.items]


def catalog_names(api: Any, namespace: str, environment: str) -> list[str] | None:
    found = get(api, namespace, "ServiceCatalog", environment)
    if found is None:
        return None
    return [entry["name"] for entry in (found.get("spec") or {}).get("services") or []]


def secret_data(api: Any, namespace: str, name: str) -> dict[str, str] | None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        secret = client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}


def put_secret(api: Any, namespace: str, name: str, data: dict[str, str]) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api)
    body = {"metadata": {"name": name}, "stringData": data}
    try:
        core.create_namespaced_secret(namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_secret(name, namespace, body)


def deployment(name: str, labels: dict[str, str], *, containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"deployment": name}},
            "template": {
                "metadata": {"labels": {"deployment": name}},
                "spec": {"containers": containers or [{"name": "app", "image": "example/app:1"}]},
            },
        },
    }
