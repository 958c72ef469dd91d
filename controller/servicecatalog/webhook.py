"""The controller's admission webhook: an HTTPS endpoint for ``admission.review`` and its registration.

The serving certificate is made at start by the controller itself (a throwaway CA, kept in memory), and
the ValidatingWebhookConfiguration it registers carries that CA: there is nothing to provision beforehand,
and a restart rotates both. Reached by URL (a controller outside the cluster, e.g. ``opbroker dev``) or
through a Service (in-cluster).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import logging
import ssl
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from opbroker.controller.kube import Kube
from opbroker.controller.servicecatalog import admission
from opbroker.controller.servicecatalog.resources import GROUP, INSTANCES, VERSION

logger = logging.getLogger(__name__)

CONFIGURATION = "opbroker-servicecatalog"


def serving_certificate(hosts: list[str]) -> tuple[bytes, bytes, bytes]:
    """(CA PEM, certificate PEM, key PEM) for ``hosts`` (DNS names or IP addresses), valid a year."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "opbroker webhook CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem


class WebhookServer:
    """Serves ``admission.PATH`` over HTTPS in a thread; ``bindings`` lists every Binding when asked."""

    def __init__(self, port: int, hosts: list[str], bindings: Callable[[], list[dict[str, Any]]]) -> None:
        self.ca, cert, key = serving_certificate(hosts)
        self._dir = tempfile.TemporaryDirectory(prefix="opbroker-webhook-")
        cert_file, key_file = Path(self._dir.name, "tls.crt"), Path(self._dir.name, "tls.key")
        cert_file.write_bytes(cert)
        key_file.write_bytes(key)
        key_file.chmod(0o600)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        handler = _handler(bindings)
        self.server = ThreadingHTTPServer(("0.0.0.0", port), handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="webhook", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self._dir.cleanup()


def _handler(bindings: Callable[[], list[dict[str, Any]]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.split("?")[0] != admission.PATH:
                self.send_error(404)
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                request = body["request"]
                found = admission.bindings_of(request.get("oldObject") or {}, bindings())
                answer = admission.review(request, found)
            except Exception as exc:  # a broken request gets an answer, never a dropped connection
                logger.warning("admission review failed: %s", type(exc).__name__)
                self.send_error(400)
                return
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return  # one line per DELETE is noise; refusals are visible to the user who asked

    return Handler


def configuration(ca: bytes, *, url: str | None = None, service: tuple[str, str, int] | None = None) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration sending Instance DELETEs to the webhook (by URL or Service)."""
    client_config: dict[str, Any] = {"caBundle": base64.b64encode(ca).decode()}
    if url is not None:
        client_config["url"] = url.rstrip("/") + admission.PATH
    else:
        assert service is not None
        namespace, name, port = service
        client_config["service"] = {"namespace": namespace, "name": name, "port": port, "path": admission.PATH}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION},
        "webhooks": [
            {
                "name": "instances.servicecatalog.k8s.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "timeoutSeconds": 5,
                "clientConfig": client_config,
                "rules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": [VERSION],
                        "resources": [INSTANCES],
                        "operations": ["DELETE"],
                        "scope": "Namespaced",
                    }
                ],
            }
        ],
    }


def register(kube: Kube, manifest: dict[str, Any]) -> None:
    """Create or update the configuration by server-side apply (a restart brings a new CA)."""
    kube.apply(manifest, field_manager="opbroker-webhook")
