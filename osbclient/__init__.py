"""A client for any Open Service Broker (API v2.13 to v2.17), shared by the Pulumi provider and the controllers.

A leaf library: it imports nothing else of opbroker (an import-linter contract holds it to that), so any
process that talks to a broker can use it. One module per job:

* ``config``: the broker endpoint (URL, basic or bearer auth, TLS trust, timeouts, version, identity);
* ``versions``: the versions spoken (2.17 down to 2.13, stepped down on 412) and what each defines;
* ``tolerance``: how answers are read (empty means absent, unknown ignored, odd optional fields dropped), the
  one rule the broker side applies to requests too;
* ``catalog``: a catalog as typed values, odd entries skipped and reported;
* ``client``: ``Client``, one method per OSB endpoint;
* ``paths``: every OSB path the client sends, its ids checked against the one id rule and percent-encoded;
* ``results``: what the broker answered;
* ``errors``: what went wrong, by kind;
* ``polling``: when to poll ``last_operation`` again (blocking ``wait``, non-blocking ``next_poll``);
* ``mitigation``: whether a failure needs orphan mitigation (the spec's table);
* ``classification``: whether a failure is worth retrying.
"""

from opbroker.osbclient import catalog, paths, tolerance, versions
from opbroker.osbclient.classification import Failure, classify, is_retryable
from opbroker.osbclient.client import Client
from opbroker.osbclient.config import (
    API_VERSION,
    TLS,
    Auth,
    BasicAuth,
    BearerToken,
    Broker,
    OriginatingIdentity,
    kubernetes_identity,
)
from opbroker.osbclient.errors import (
    BadRequest,
    BrokerError,
    BrokerUnreachable,
    Conflict,
    Forbidden,
    Gone,
    MalformedResponse,
    NotFound,
    NotInVersion,
    OperationFailed,
    OperationTimeout,
    OSBError,
    PreconditionFailed,
    RequestTimeout,
    ResponseLost,
    ServerError,
    TooManyRequests,
    TransportFailure,
    Unauthorized,
    Unprocessable,
)
from opbroker.osbclient.mitigation import Request, needs_orphan_mitigation, needs_orphan_mitigation_after
from opbroker.osbclient.paths import ID_RULE, MAX_ID_BYTES, InvalidID, check_id
from opbroker.osbclient.polling import EXPIRED, Backoff, NextPoll, next_poll, parse_retry_after, wait
from opbroker.osbclient.results import (
    FAILED,
    IN_PROGRESS,
    SUCCEEDED,
    BindingResult,
    InstanceResult,
    LastOperation,
)

__all__ = [
    "API_VERSION",
    "EXPIRED",
    "FAILED",
    "ID_RULE",
    "IN_PROGRESS",
    "MAX_ID_BYTES",
    "SUCCEEDED",
    "TLS",
    "Auth",
    "Backoff",
    "BadRequest",
    "BasicAuth",
    "BearerToken",
    "BindingResult",
    "Broker",
    "BrokerError",
    "BrokerUnreachable",
    "Client",
    "Conflict",
    "Failure",
    "Forbidden",
    "Gone",
    "InstanceResult",
    "InvalidID",
    "LastOperation",
    "MalformedResponse",
    "NextPoll",
    "NotFound",
    "NotInVersion",
    "OSBError",
    "OperationFailed",
    "OperationTimeout",
    "OriginatingIdentity",
    "PreconditionFailed",
    "Request",
    "RequestTimeout",
    "ResponseLost",
    "ServerError",
    "TooManyRequests",
    "TransportFailure",
    "Unauthorized",
    "Unprocessable",
    "catalog",
    "check_id",
    "classify",
    "is_retryable",
    "kubernetes_identity",
    "needs_orphan_mitigation",
    "needs_orphan_mitigation_after",
    "next_poll",
    "parse_retry_after",
    "paths",
    "tolerance",
    "versions",
    "wait",
]
