"""The OSB request headers: API version, originating identity, request identity, basic credentials.

Pure functions over header values; the HTTP edge reads the headers and calls these.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from dataclasses import dataclass
from typing import Any

from opbroker.broker import errors

VERSION_HEADER = "X-Broker-API-Version"
ORIGINATING_IDENTITY_HEADER = "X-Broker-API-Originating-Identity"
REQUEST_IDENTITY_HEADER = "X-Broker-API-Request-Identity"

#: The OSB API versions this broker speaks: everything from 2.12 (context, originating identity) on.
MIN_VERSION = (2, 12)
MAX_VERSION = (2, 17)
SUPPORTED_VERSIONS = tuple(f"2.{minor}" for minor in range(MIN_VERSION[1], MAX_VERSION[1] + 1))


def check_api_version(value: str | None) -> tuple[int, int]:
    """The ``(major, minor)`` of an acceptable ``X-Broker-API-Version``; 412 if missing or unsupported."""
    supported = f"{SUPPORTED_VERSIONS[0]} to {SUPPORTED_VERSIONS[-1]}"
    if value is None or not value.strip():
        raise errors.BrokerError(
            errors.Reason.API_VERSION, f"the {VERSION_HEADER} header is required; this broker supports {supported}"
        )
    if value.strip() not in SUPPORTED_VERSIONS:
        raise errors.BrokerError(
            errors.Reason.API_VERSION,
            f"{VERSION_HEADER} {value[:20]!r} is not supported; use a version from {supported}",
        )
    major, minor = value.strip().split(".")
    return int(major), int(minor)


@dataclass(frozen=True)
class OriginatingIdentity:
    """``X-Broker-API-Originating-Identity: <platform> <base64 of a JSON object>``, decoded."""

    platform: str
    value: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps({"platform": self.platform, "value": self.value}, sort_keys=True, separators=(",", ":"))


def parse_originating_identity(header: str | None) -> OriginatingIdentity | None:
    """Decode the header; ``None`` when absent, 400 when it does not follow ``platform base64(json)``."""
    if header is None or not header.strip():
        return None
    parts = header.strip().split(None, 1)
    if len(parts) != 2:
        raise errors.bad_request(f"{ORIGINATING_IDENTITY_HEADER} must be '<platform> <base64-encoded JSON object>'")
    platform, encoded = parts
    try:
        decoded = json.loads(base64.b64decode(encoded.strip(), validate=True))
    except (binascii.Error, ValueError) as exc:
        raise errors.bad_request(
            f"{ORIGINATING_IDENTITY_HEADER}: the value after the platform is not base64 of a JSON object"
        ) from exc
    if not isinstance(decoded, dict):
        raise errors.bad_request(f"{ORIGINATING_IDENTITY_HEADER}: the decoded value must be a JSON object")
    return OriginatingIdentity(platform=platform, value=decoded)


def request_identity(header: str | None) -> str | None:
    """The request identity to echo and record; blank counts as absent, and it is cut to a sane length."""
    if header is None or not header.strip():
        return None
    return header.strip()[:256]


@dataclass(frozen=True)
class RequestMeta:
    """What the headers say about who asked (recorded on the objects a request changes) and in which API
    version."""

    originating_identity: OriginatingIdentity | None = None
    request_identity: str | None = None
    #: The request's ``X-Broker-API-Version``: which fields its body can mean (see ``bodies.as_of``).
    api_version: tuple[int, int] = MAX_VERSION


def basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    """``(username, password)`` from an ``Authorization: Basic ...`` header, ``None`` if there is none."""
    if not authorization:
        return None
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic" or not encoded:
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    username, sep, password = decoded.partition(":")
    if not sep:
        return None
    return username, password


def credentials_match(given: tuple[str, str] | None, expected: tuple[str, str]) -> bool:
    """Constant-time comparison of both parts (both are always compared, so timing tells nothing)."""
    user, password = given if given is not None else ("", "")
    user_ok = secrets.compare_digest(user.encode("utf-8"), expected[0].encode("utf-8"))
    password_ok = secrets.compare_digest(password.encode("utf-8"), expected[1].encode("utf-8"))
    return given is not None and user_ok and password_ok
