"""The webhook's CA and serving certificate, one pair for every replica, kept in a Secret.

The API server verifies the webhook against the one ``caBundle`` of its ValidatingWebhookConfiguration. If each
replica made its own CA (as the first webhook did), the last one to register would win and the API server
would refuse every other replica's certificate — the review fails and ``failurePolicy: Ignore`` lets the
DELETE through. So the first replica to start creates a CA and a serving certificate and stores both, keys
included, in a ``kubernetes.io/tls`` Secret in the control-plane namespace; every replica serves that one.

Race-safe without a lock: creating is ``create`` (a second creator gets 409 and reads the winner's), renewing
is an ``update`` guarded by the resourceVersion it read (a loser gets 409 and reads the winner's).

Renewal: the serving certificate (``LEAF_DAYS``) is re-issued from the same CA when it has less than
``RENEW_DAYS`` left or does not name every host wanted; the CA (``CA_DAYS``) is replaced only when it has less
than ``RENEW_DAYS`` left itself. Re-issuing under the same CA keeps the registered ``caBundle`` valid for the
replicas that still serve the previous certificate.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from opbroker.controller.core.views import SecretView
from opbroker.controller.runtime.clock import SYSTEM, Clock
from opbroker.controller.runtime.policies import DEFAULTS, Policies
from opbroker.kubeclient.lean import LeanApi, object_path
from opbroker.kubeclient.wire import JsonBody, mapping_of
from opbroker.rendering import certificates

logger = logging.getLogger(__name__)

CA_DAYS = 3650
LEAF_DAYS = 365
RENEW_DAYS = 30
#: Keys of the Secret: the usual ``kubernetes.io/tls`` pair, and the CA that issued it.
CERT_KEY, KEY_KEY, CA_CERT_KEY, CA_KEY_KEY = "tls.crt", "tls.key", "ca.crt", "ca.key"
#: (connect, read) deadline of each Secret read or write.
API_TIMEOUT = (5.0, 10.0)


@dataclass(frozen=True)
class Bundle:
    """PEM bytes of the CA and of the serving certificate, with their keys."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes


def issue(hosts: Sequence[str], *, now: datetime.datetime, ca: Bundle | None = None) -> Bundle:
    """A serving certificate for ``hosts`` (DNS names or IP addresses) signed by ``ca``'s CA (a new CA when
    None). Pure but for the randomness of keys and serials."""
    if ca is None:
        ca_key, ca_cert = certificates.new_ca("opbroker webhook CA", now=now, days=CA_DAYS)
    else:
        loaded_key = serialization.load_pem_private_key(ca.ca_key, password=None)
        assert isinstance(loaded_key, ec.EllipticCurvePrivateKey)
        ca_key, ca_cert = loaded_key, x509.load_pem_x509_certificate(ca.ca_cert)
    key = ec.generate_private_key(ec.SECP256R1())
    dns_names, ip_addresses = certificates.hosts(hosts)
    cert = certificates.issue(
        certificates.Subject(hosts[0], dns_names=dns_names, ip_addresses=ip_addresses),
        key.public_key(),
        signing_key=ca_key,
        issuer=ca_cert,
        now=now,
        days=LEAF_DAYS,
        usages=[certificates.SERVER_AUTH],
    )
    pem = serialization.Encoding.PEM
    pkcs8, plain = serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    return Bundle(
        ca_cert=ca_cert.public_bytes(pem),
        ca_key=ca_key.private_bytes(pem, pkcs8, plain),
        cert=cert.public_bytes(pem),
        key=key.private_bytes(pem, pkcs8, plain),
    )


def renewal(bundle: Bundle, hosts: Sequence[str], *, now: datetime.datetime) -> str | None:
    """Why ``bundle`` cannot serve ``hosts`` for long (``"ca"``: a new CA is due, ``"leaf"``: a new serving
    certificate from the same CA), or None when it can. Pure."""
    margin = datetime.timedelta(days=RENEW_DAYS)
    ca = x509.load_pem_x509_certificate(bundle.ca_cert)
    if ca.not_valid_after_utc - now < margin:
        return "ca"
    leaf = x509.load_pem_x509_certificate(bundle.cert)
    if leaf.not_valid_after_utc - now < margin or leaf.issuer != ca.subject:
        return "leaf"
    try:
        named = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "leaf"
    dns, ips = set(named.get_values_for_type(x509.DNSName)), set(named.get_values_for_type(x509.IPAddress))
    for host in hosts:
        try:
            if ipaddress.ip_address(host) not in ips:
                return "leaf"
        except ValueError:
            if host not in dns:
                return "leaf"
    return None


def _from_secret(secret: SecretView) -> Bundle | None:
    try:
        return Bundle(*(base64.b64decode(secret.data[key]) for key in (CA_CERT_KEY, CA_KEY_KEY, CERT_KEY, KEY_KEY)))
    except (KeyError, ValueError):
        return None


def _secret_data(bundle: Bundle) -> dict[str, str]:
    values = {CA_CERT_KEY: bundle.ca_cert, CA_KEY_KEY: bundle.ca_key, CERT_KEY: bundle.cert, KEY_KEY: bundle.key}
    return {key: base64.b64encode(value).decode() for key, value in values.items()}


class SharedCertificate:
    """The Secret ``namespace/name`` holding the webhook's :class:`Bundle`."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        name: str,
        *,
        policies: Policies = DEFAULTS,
        clock: Clock = SYSTEM,
    ) -> None:
        self._api = LeanApi(api_client)
        self._policies = policies
        """The timing table: a lost race (409) re-reads the winner's Secret and tries again on its
        ``write_retries`` — a loop in place: this runs in the webhook's threads, outside any reconcile."""
        self._clock = clock
        """What a certificate's validity is issued from and checked against (the real one by default)."""
        self.namespace = namespace
        self.name = name

    def ensure(self, hosts: Sequence[str]) -> Bundle:
        """The stored bundle, created or renewed first when it is missing, unreadable or due (see the module);
        whichever replica wins a race, every replica ends with the winner's bundle."""
        for _ in self._policies.attempts(self._policies.write_retries):
            now = self._clock.now()
            secret = self._read()
            if secret is None:
                bundle = issue(hosts, now=now)
                if self._create(bundle):
                    logger.info("created the webhook's CA and certificate (Secret %s/%s)", self.namespace, self.name)
                    return bundle
                continue  # another replica created it first: use theirs
            stored = _from_secret(secret)
            due = "ca" if stored is None else renewal(stored, hosts, now=now)
            if due is None:
                assert stored is not None
                return stored
            bundle = issue(hosts, now=now, ca=None if due == "ca" else stored)
            if self._replace(secret, bundle):
                logger.info("renewed the webhook's %s (Secret %s/%s)", due, self.namespace, self.name)
                return bundle
        raise RuntimeError(f"the webhook's Secret {self.namespace}/{self.name} kept changing under it")

    @property
    def _path(self) -> str:
        return object_path("/api/v1", "secrets", self.namespace, self.name)

    def _read(self) -> SecretView | None:
        try:
            return SecretView.of(mapping_of(self._api.request("GET", self._path, timeout=API_TIMEOUT)))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _manifest(self, bundle: Bundle, resource_version: str | None = None) -> JsonBody:
        meta: JsonBody = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/part-of": "opbroker", "app.kubernetes.io/component": "webhook"},
        }
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        return {"metadata": meta, "type": "kubernetes.io/tls", "data": _secret_data(bundle)}

    def _create(self, bundle: Bundle) -> bool:
        path = object_path("/api/v1", "secrets", self.namespace)
        try:
            self._api.request("POST", path, body=self._manifest(bundle), timeout=API_TIMEOUT)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def _replace(self, secret: SecretView, bundle: Bundle) -> bool:
        body = self._manifest(bundle, secret.meta.resource_version)
        try:
            self._api.request("PUT", self._path, body=body, timeout=API_TIMEOUT)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True
