"""The OSB API versions this client speaks, and what each one defines.

A broker answers ``412 Precondition Failed`` to an ``X-Broker-API-Version`` it does not support. Many real
brokers support one version only (those generated from the OSB OpenAPI document of their day, typically 2.13
or 2.14), so the client starts at the version configured (2.17 by default) and steps down one minor version
at a time on each 412 until one is accepted (:func:`below`); the caller records the one that worked.

Speaking a version means sending only what it defines and expecting only what it promises. The table below
is taken from the specification's release notes (v2.13 … v2.17); what an older version does not define is
neither sent nor read (a field a broker sends anyway is unknown to that version, and unknown fields are
ignored — the same rule the broker side applies to requests, ``opbroker.broker.bodies.as_of``):

==============================  =====  ==========================================================================
feature                         since  what the client does before that version
==============================  =====  ==========================================================================
``ASYNC_BINDINGS``              2.14   bind/unbind without ``accepts_incomplete`` (synchronous only); no binding
                                       ``last_operation``
``FETCH``                       2.14   no ``GET`` of an instance or binding (raises :class:`NotDefined`)
``MAINTENANCE_INFO``            2.15   no ``maintenance_info`` in provision/update bodies; a catalog's is ignored
``REQUEST_IDENTITY``            2.15   no ``X-Broker-API-Request-Identity`` header
``RETRY_AFTER``                 2.15   a ``Retry-After`` on ``last_operation`` is not read (own backoff only)
``MAXIMUM_POLLING_DURATION``    2.15   a plan's ``maximum_polling_duration`` is ignored (own limit only)
``BINDING_ENDPOINTS``           2.15   a bind answer's ``endpoints`` is ignored
``FETCH_HINTS``                 2.16   no ``service_id``/``plan_id`` query on the instance and binding GETs
``RESPONSE_METADATA``           2.16   an instance's or binding's ``metadata`` in answers is ignored
==============================  =====  ==========================================================================

Originating identity and ``context`` (2.12/2.13), schemas in the catalog (2.13) and bearer tokens (2.13/2.14)
are in every version spoken. Pure: no I/O.
"""

from __future__ import annotations

from enum import StrEnum

#: Every version the client speaks, newest first: the order it steps down in.
SUPPORTED: tuple[str, ...] = ("2.17", "2.16", "2.15", "2.14", "2.13")
LATEST = SUPPORTED[0]
OLDEST = SUPPORTED[-1]


class Feature(StrEnum):
    ASYNC_BINDINGS = "asynchronous bindings"
    FETCH = "fetching an instance or binding"
    MAINTENANCE_INFO = "maintenance_info"
    REQUEST_IDENTITY = "X-Broker-API-Request-Identity"
    RETRY_AFTER = "Retry-After on last_operation"
    MAXIMUM_POLLING_DURATION = "maximum_polling_duration"
    BINDING_ENDPOINTS = "binding endpoints"
    FETCH_HINTS = "service_id and plan_id on fetches"
    RESPONSE_METADATA = "instance and binding metadata"


SINCE: dict[Feature, tuple[int, int]] = {
    Feature.ASYNC_BINDINGS: (2, 14),
    Feature.FETCH: (2, 14),
    Feature.MAINTENANCE_INFO: (2, 15),
    Feature.REQUEST_IDENTITY: (2, 15),
    Feature.RETRY_AFTER: (2, 15),
    Feature.MAXIMUM_POLLING_DURATION: (2, 15),
    Feature.BINDING_ENDPOINTS: (2, 15),
    Feature.FETCH_HINTS: (2, 16),
    Feature.RESPONSE_METADATA: (2, 16),
}


class NotDefined(ValueError):
    """The request needs something the version spoken does not define (e.g. a GET of a binding in 2.13)."""

    def __init__(self, feature: Feature, version: str) -> None:
        self.feature = feature
        self.version = version
        since = ".".join(map(str, SINCE[feature]))
        super().__init__(f"{feature.value} needs OSB {since} or later; the broker speaks {version}")


def parse(version: str) -> tuple[int, int]:
    """``"2.14"`` → ``(2, 14)``; ValueError for anything this client does not speak."""
    if version not in SUPPORTED:
        raise ValueError(f"OSB API version {version!r} is not one this client speaks ({', '.join(SUPPORTED)})")
    major, minor = version.split(".")
    return int(major), int(minor)


def defines(version: str, feature: Feature) -> bool:
    """Whether ``version`` has ``feature``."""
    return parse(version) >= SINCE[feature]


def below(version: str) -> str | None:
    """The version to try after a 412 to ``version``: the next older one, None below the oldest."""
    index = SUPPORTED.index(version)
    return SUPPORTED[index + 1] if index + 1 < len(SUPPORTED) else None


def tried_from(version: str) -> tuple[str, ...]:
    """Every version a negotiation starting at ``version`` may try, in order."""
    return SUPPORTED[SUPPORTED.index(version) :]
