"""X.509 certificates built one way for everything opbroker issues: a plan's ``generateCertificate``, the
admission webhook's CA and serving certificate, and the local cluster's PKI.

Pure but for the randomness of serial numbers. Every certificate is valid from five minutes before ``now``
(clocks of the peers that check it drift), carries subject and authority key identifiers (so a chain is found
by key, not by name alone), and a CA gets ``keyCertSign``/``cRLSign`` as a critical key usage.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: How long before ``now`` a certificate starts to be valid.
BACKDATE = datetime.timedelta(minutes=5)
SERVER_AUTH = ExtendedKeyUsageOID.SERVER_AUTH
CLIENT_AUTH = ExtendedKeyUsageOID.CLIENT_AUTH


@dataclass(frozen=True)
class Subject:
    """What a certificate says about its holder."""

    common_name: str
    organization: str | None = None
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[IpAddress, ...] = ()

    def name(self) -> x509.Name:
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, self.common_name)]
        if self.organization:
            attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, self.organization))
        return x509.Name(attributes)


def hosts(values: Iterable[str]) -> tuple[tuple[str, ...], tuple[IpAddress, ...]]:
    """Host strings split into DNS names and IP addresses (a string that parses as an address is one)."""
    dns: list[str] = []
    ips: list[IpAddress] = []
    for value in values:
        try:
            ips.append(ipaddress.ip_address(value))
        except ValueError:
            dns.append(value)
    return tuple(dns), tuple(ips)


def issue(
    subject: Subject,
    public_key: Any,
    *,
    signing_key: Any,
    issuer: x509.Certificate | None,
    now: datetime.datetime,
    days: float,
    ca: bool = False,
    path_length: int | None = None,
    usages: Sequence[x509.ObjectIdentifier] = (),
) -> x509.Certificate:
    """A certificate for ``public_key`` signed by ``signing_key``: by ``issuer``'s key, or self-signed when
    ``issuer`` is None. A CA (``ca``) gets the CA key usages and ``path_length``; any other certificate the
    extended key usages ``usages`` (none: unrestricted)."""
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject.name())
        .issuer_name(issuer.subject if issuer is not None else subject.name())
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length if ca else None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(
                issuer.public_key() if issuer is not None else public_key  # type: ignore[arg-type]
            ),
            critical=False,
        )
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    elif usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    alternative: list[x509.GeneralName] = [x509.DNSName(name) for name in subject.dns_names]
    alternative += [x509.IPAddress(ip) for ip in subject.ip_addresses]
    if alternative:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
    algorithm = None if isinstance(signing_key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(signing_key, algorithm)


def new_ca(
    common_name: str, *, now: datetime.datetime, days: float
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new self-signed CA on a P-256 key that signs leaf certificates only (path length 0), with its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = issue(
        Subject(common_name), key.public_key(), signing_key=key, issuer=None, now=now, days=days, ca=True, path_length=0
    )
    return key, certificate
