"""The certificates a local control plane needs: a CA, the API server's serving certificate (valid for
127.0.0.1, the node address and the ``kubernetes`` Service, so pods verify it too), the client
certificate the API server presents to kubelets (for ``kubectl logs`` and ``exec``), and the
service-account signing key. Made with the ``cryptography`` library so the kubeconfig can verify TLS
instead of skipping verification.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from opbroker.rendering import certificates

#: How long the local cluster's certificates last: ten years (a dev cluster is never renewed).
DAYS = 3650


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    kubelet_client_cert: Path
    kubelet_client_key: Path

    def files(self) -> tuple[Path, ...]:
        return (
            self.ca_cert,
            self.serving_cert,
            self.serving_key,
            self.service_account_key,
            self.kubelet_client_cert,
            self.kubelet_client_key,
        )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def ensure_pki(directory: Path, *, extra_ips: tuple[str, ...] = ()) -> Pki:
    """Create the PKI in ``directory`` unless it is already there (certificates last ten years).

    ``extra_ips``: more addresses the serving certificate must be valid for (the node address and the
    ``kubernetes`` Service's cluster IP).
    """
    pki = Pki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        service_account_key=directory / "service-account.key",
        kubelet_client_cert=directory / "apiserver-kubelet-client.crt",
        kubelet_client_key=directory / "apiserver-kubelet-client.key",
    )
    if all(p.exists() for p in pki.files()) and _covers(pki.serving_cert, extra_ips):
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    ca_key, ca = certificates.new_ca("opbroker-local-ca", now=now, days=DAYS)

    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving = certificates.issue(
        certificates.Subject(
            "kube-apiserver",
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ip_addresses=(ipaddress.ip_address("127.0.0.1"), *(ipaddress.ip_address(ip) for ip in extra_ips)),
        ),
        serving_key.public_key(),
        signing_key=ca_key,
        issuer=ca,
        now=now,
        days=DAYS,
        usages=[certificates.SERVER_AUTH],
    )

    # What the API server shows kubelets; in system:masters, so kubelet's webhook authorizer lets it in.
    kubelet_client_key = ec.generate_private_key(ec.SECP256R1())
    kubelet_client = certificates.issue(
        certificates.Subject("kube-apiserver-kubelet-client", organization="system:masters"),
        kubelet_client_key.public_key(),
        signing_key=ca_key,
        issuer=ca,
        now=now,
        days=DAYS,
        usages=[certificates.CLIENT_AUTH],
    )

    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.kubelet_client_cert.write_bytes(kubelet_client.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.kubelet_client_key, kubelet_client_key)
    pki.serving_cert.write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.serving_key, serving_key)
    _write_key(pki.service_account_key, rsa.generate_private_key(public_exponent=65537, key_size=2048))
    return pki


def _covers(cert_file: Path, ips: tuple[str, ...]) -> bool:
    """Whether the serving certificate already names every address in ``ips``."""
    if not ips:
        return True
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    have = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    return set(ips) <= have
