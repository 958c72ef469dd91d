"""``SecondBroker``: runs ``second_broker.py`` as its own process and drives its admin API; pytest fixtures.

The broker is a separate process (``sys.executable``) so the code under test meets it only over HTTP(S), as it
would meet a vendor's broker. Fixtures (registered from ``tests/conftest.py`` through ``pytest_plugins``):

* ``second_broker``: plain HTTP, basic auth; a fresh process per test, so no state leaks between tests.
* ``second_broker_tls``: the same over HTTPS, with a throw-away CA from ``trustme`` (``ca_pem`` / ``ca_file``).
* ``second_broker_token``: plain HTTP, opaque bearer token instead of basic auth.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import httpx
import pytest

SCRIPT = Path(__file__).with_name("second_broker.py")
CATALOG = Path(__file__).with_name("second_catalog.json")
API_VERSION = "2.17"

# The default catalog's ids (tests/brokers/second_catalog.json), named for tests.
DB_SERVICE = "2b1b0d54-6a4e-4f7e-9d2c-5ec0d0000001"  # second-db: bindable, plan_updateable, retrievable
DB_SYNC_PLAN = "2b1b0d54-6a4e-4f7e-9d2c-5ec0d0000011"  # sync-small: always 201/200, maintenance_info 1.0.0
DB_ASYNC_PLAN = "2b1b0d54-6a4e-4f7e-9d2c-5ec0d0000012"  # async-large: 202 only, async bindings too
QUEUE_SERVICE = "2b1b0d54-6a4e-4f7e-9d2c-5ec0d0000002"  # second-queue: not bindable, not plan_updateable
QUEUE_PLAN = "2b1b0d54-6a4e-4f7e-9d2c-5ec0d0000021"  # standard
QUEUE_LARGE_PLAN = "2b1b0d54-6a4e-4f7e-9d2c-5ec0d0000022"  # large


def default_catalog() -> dict[str, Any]:
    """A fresh copy of the default catalog, to edit and hand to ``set_catalog``."""
    catalog: dict[str, Any] = json.loads(CATALOG.read_text())
    return catalog


class SecondBroker:
    """The second broker process: start on ``__enter__`` (or ``start``), stop on ``__exit__`` (or ``stop``).

    ``url``, ``username``/``password`` or ``token``, and with TLS ``ca_pem``/``ca_file`` say how to reach it;
    ``osb_headers()`` and ``client()`` build requests the way a platform would.
    """

    def __init__(
        self,
        *,
        tls: bool = False,
        auth: Literal["basic", "bearer", "none"] = "basic",
        catalog: dict[str, Any] | None = None,
        startup_timeout: float = 15.0,
    ) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="second-broker-"))
        self.tls = tls
        self.username: str | None = "second-user" if auth == "basic" else None
        self.password: str | None = secrets.token_urlsafe(12) if auth == "basic" else None
        self.token: str | None = secrets.token_urlsafe(24) if auth == "bearer" else None
        self.ca_pem: str | None = None
        self.ca_file: Path | None = None
        self.url = ""
        self._catalog = catalog
        self._timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._admin: httpx.Client | None = None

    # -- process ---------------------------------------------------------------------------------------------

    def start(self) -> SecondBroker:
        """Start the process and wait for its port file; raise with its stderr if it does not come up."""
        port_file = self._dir / "port"
        args = [sys.executable, str(SCRIPT), "--port", "0", "--port-file", str(port_file)]
        if self.username and self.password:
            # "--name=value": a random secret may start with "-", which argparse would take for an option.
            args += [f"--username={self.username}", f"--password={self.password}"]
        if self.token:
            args += [f"--token={self.token}"]
        if self._catalog is not None:
            catalog_file = self._dir / "catalog.json"
            catalog_file.write_text(json.dumps(self._catalog))
            args += ["--catalog", str(catalog_file)]
        if self.tls:
            args += self._issue_certificates()
        self._stderr = (self._dir / "stderr").open("wb")
        self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr)
        deadline = time.monotonic() + self._timeout
        while not port_file.exists():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                why = f"exited with {self._proc.returncode}" if self._proc.returncode is not None else "timed out"
                self._stderr.flush()
                err = self.stderr()
                self.stop()
                raise RuntimeError(f"second broker did not start ({why}); stderr:\n{err}")
            time.sleep(0.02)
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{int(port_file.read_text())}"
        self._admin = httpx.Client(base_url=self.url, headers={"X-Admin": "1"}, verify=self.verify(), timeout=10)
        return self

    def _issue_certificates(self) -> list[str]:
        """A throw-away CA and a server certificate for localhost and 127.0.0.1 (``trustme``, dev extra)."""
        import trustme  # only TLS brokers need it

        ca = trustme.CA()
        server = ca.issue_cert("localhost", "127.0.0.1")
        cert, key = self._dir / "server.pem", self._dir / "server.key"
        server.private_key_pem.write_to_path(str(key))
        server.cert_chain_pems[0].write_to_path(str(cert))
        for extra in server.cert_chain_pems[1:]:
            extra.write_to_path(str(cert), append=True)
        self.ca_pem = ca.cert_pem.bytes().decode()
        self.ca_file = self._dir / "ca.pem"
        self.ca_file.write_text(self.ca_pem)
        return ["--tls-cert", str(cert), "--tls-key", str(key)]

    def stop(self) -> None:
        """Stop the process (terminate, then kill) and close the admin client; safe to call twice."""
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        if getattr(self, "_stderr", None) is not None:
            self._stderr.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def stderr(self) -> str:
        """What the process wrote to stderr so far (its request log and any traceback)."""
        path = self._dir / "stderr"
        return path.read_text(errors="replace") if path.exists() else ""

    def __enter__(self) -> SecondBroker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- reaching it as a platform -----------------------------------------------------------------------------

    def verify(self) -> ssl.SSLContext | bool:
        """What an httpx client needs to trust this broker: an SSL context with our CA (TLS) or True."""
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else True

    def osb_headers(self, version: str = API_VERSION) -> dict[str, str]:
        """``Authorization`` (basic or bearer) and ``X-Broker-API-Version``, as a platform sends them."""
        headers = {"X-Broker-API-Version": version}
        if self.username and self.password:
            pair = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            headers["Authorization"] = f"Basic {pair}"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def client(self, **kwargs: Any) -> httpx.Client:
        """An httpx client for the OSB API: base URL, auth, version header and CA set (kwargs override)."""
        options: dict[str, Any] = {"base_url": self.url, "headers": self.osb_headers(), "verify": self.verify()}
        return httpx.Client(**(options | {"timeout": 10} | kwargs))

    # -- admin API --------------------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        assert self._admin is not None, "the second broker is not running"
        response = self._admin.request(method, path, json=body)
        response.raise_for_status()
        return response.json()

    def fail(
        self,
        method: str | None,
        path_regex: str,
        status: int | None,
        body: str | None = None,
        delay: float = 0,
        times: int | None = 1,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` requests matching ``method`` (None: any) and ``path_regex`` (``re.search`` on
        the path, no query) with ``status`` and ``body`` sent verbatim (malformed JSON allowed), after ``delay``
        seconds. ``status=None`` only delays the real answer (a slow broker); ``times=None`` never runs out."""
        rule = {
            "method": method,
            "path_regex": path_regex,
            "status": status,
            "body": body,
            "delay_seconds": delay,
            "times": times,
            "headers": headers or {},
        }
        self._call("POST", "/admin/faults", [rule])

    def clear_faults(self) -> None:
        """Drop every fault rule not yet used up."""
        self._call("DELETE", "/admin/faults")

    def set_catalog(self, catalog: dict[str, Any]) -> None:
        """Replace the catalog the next ``GET /v2/catalog`` returns (and provisioning checks against)."""
        self._call("PUT", "/admin/catalog", catalog)

    def settings(self, **settings: Any) -> dict[str, Any]:
        """Change settings and return them all: ``async_polls`` (int), ``retry_after`` (seconds or None),
        ``failed_operations`` ({plan_id: ["provision", "update", "deprovision", "bind", "unbind"]}),
        ``deprovision_gone`` (bool). Unknown names are refused."""
        result: dict[str, Any] = self._call("PUT", "/admin/settings", settings)
        return result

    def requests(self) -> list[dict[str, Any]]:
        """Every OSB request so far: method, path, query, auth (scheme only), headers, body, status, fault,
        and ``at``, when it arrived (``time.time()``)."""
        result: list[dict[str, Any]] = self._call("GET", "/admin/requests")
        return result

    def clear_requests(self) -> None:
        """Forget the request log (to look only at what a step sends)."""
        self._call("DELETE", "/admin/requests")

    def state(self) -> dict[str, Any]:
        """``{"instances": {id: ...}, "bindings": {"instance_id/binding_id": ...}}`` as the broker holds them."""
        result: dict[str, Any] = self._call("GET", "/admin/state")
        return result


@pytest.fixture
def second_broker() -> Iterator[SecondBroker]:
    """A second broker over plain HTTP with basic auth, fresh for each test."""
    with SecondBroker() as broker:
        yield broker


@pytest.fixture
def second_broker_tls() -> Iterator[SecondBroker]:
    """A second broker over HTTPS (a trustme CA: ``ca_pem``/``ca_file``) with basic auth, fresh for each test."""
    with SecondBroker(tls=True) as broker:
        yield broker


@pytest.fixture
def second_broker_token() -> Iterator[SecondBroker]:
    """A second broker over plain HTTP taking an opaque bearer token, fresh for each test."""
    with SecondBroker(auth="bearer") as broker:
        yield broker
