"""Running the broker: a Kubernetes client from a kubeconfig (or in-cluster), the app, and uvicorn."""

from __future__ import annotations

import threading
from pathlib import Path

import uvicorn
from kubernetes import client, config

from opbroker.broker import connections
from opbroker.broker.app import create_app
from opbroker.broker.settings import Settings
from opbroker.kubeclient import deadlines

USER_AGENT = "opbroker-broker"
#: Connections kept to the API server: the request thread pool (40, Starlette's default) plus watches.
API_CONNECTIONS = 48
#: The broker's deadlines: per read of an ordinary request's answer half the 60 s an OSB platform commonly waits
#: for the broker, so the broker answers (an error) before the platform gives up on it; watches as the controller's.
TIMEOUTS = deadlines.Timeouts(request=30.0)


def kubernetes_client(kubeconfig: Path | None = None, timeouts: deadlines.Timeouts = TIMEOUTS) -> client.ApiClient:
    """A client for ``kubeconfig``; without one, the in-cluster service account, then ``~/.kube/config``.

    Every call has a deadline (``timeouts``) and its sockets TCP keepalive (:mod:`opbroker.kubeclient.deadlines`).
    Its User-Agent names the broker, so API server audit logs (and the benchmarks) can tell its requests apart.
    Its connection pool is as large as the request thread pool plus the index's watches: a smaller pool
    makes urllib3 discard the surplus connections after each request, and every new one costs the API
    server a TLS handshake (measured: two in three provisions paid one with the default pool of 10).
    """
    configuration = client.Configuration()
    if kubeconfig is not None:
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = API_CONNECTIONS
    return deadlines.bounded(configuration, timeouts=timeouts, user_agent=USER_AGENT)


def server(
    settings: Settings, api_client: client.ApiClient, *, host: str, port: int, log_level: str = "info"
) -> uvicorn.Server:
    """uvicorn serving the broker app, with the connection bounds of :mod:`opbroker.broker.connections`: h11
    (whatever else is installed), the request head limit and deadline of ``settings``, and no WebSocket
    upgrades (the broker has no WebSocket route)."""
    app = create_app(settings, api_client)
    return uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            lifespan="on",
            proxy_headers=True,
            http=connections.protocol(settings.request_head_timeout),
            ws="none",
            h11_max_incomplete_event_size=settings.max_request_head_bytes,
            access_log=False,  # the raw request line; the app logs a bounded one (opbroker.broker.access)
        )
    )


class BackgroundServer:
    """A broker served by uvicorn on a thread of this process (tests, embedding); ``stop`` ends it."""

    def __init__(self, served: uvicorn.Server) -> None:
        self.server = served
        self.thread = threading.Thread(target=served.run, name="opbroker-broker", daemon=True)

    def start(self, timeout: float = 10.0) -> None:
        self.thread.start()
        self.thread.join(0.01)
        deadline = timeout
        while not self.server.started and self.thread.is_alive() and deadline > 0:
            self.thread.join(0.02)
            deadline -= 0.02
        if not self.server.started:
            raise RuntimeError("the broker did not start (see the log above)")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
