"""Orphan mitigation: after which failures a platform should delete what it asked for, because the broker may
have created it anyway.

This is the table of the OSB specification's "Orphan Mitigation" section
(https://github.com/openservicebrokerapi/servicebroker/blob/v2.17/spec.md#orphan-mitigation), row by row:

=====================================  ======================  =========================================
Request                                Broker's answer         Orphan mitigation of the request's target
=====================================  ======================  =========================================
all                                    200 (also malformed)    no
all                                    201                     no
provision, bind                        201 malformed           yes
all                                    202                     no
provision, deprovision, bind, unbind   any other 2xx           yes (update: no)
all                                    408                     no (v2.14 dropped it: not received)
all                                    any other 4xx           no (the request was rejected)
provision, deprovision, bind, unbind   5xx                     yes (update: no)
provision, bind                        timeout                 yes (all other requests: no)
last_operation of (de)provision,       200 ``state: failed``   yes (of an update: no)
(un)bind
=====================================  ======================  =========================================

"The target" is the instance for (de)provision and update, the binding for (un)bind: mitigating means
sending the deprovision or unbind (again) until the broker answers with a success. A timeout is the
request having been sent without an answer coming back (``ResponseLost``); a request that never reached the
broker (``BrokerUnreachable``) cannot have created anything. Pure: no I/O, table-tested.
"""

from __future__ import annotations

from enum import StrEnum

from opbroker.osbclient.errors import (
    BrokerError,
    MalformedResponse,
    OperationFailed,
    OperationTimeout,
    OSBError,
    ResponseLost,
)


class Request(StrEnum):
    """The OSB requests the table distinguishes."""

    PROVISION = "provision"
    UPDATE = "update"
    DEPROVISION = "deprovision"
    BIND = "bind"
    UNBIND = "unbind"


_CREATES = frozenset({Request.PROVISION, Request.BIND})
_NOT_UPDATE = frozenset(Request) - {Request.UPDATE}


def needs_orphan_mitigation(
    request: Request, *, status: int | None, malformed: bool = False, failed_state: bool = False
) -> bool:
    """Whether the table asks for orphan mitigation.

    ``status``: the broker's HTTP status, None when the request was sent and no answer came (timeout,
    connection dropped). ``malformed``: the success body could not be read. ``failed_state``: a
    ``last_operation`` poll for this request answered ``state: failed`` (then ``status`` is that poll's 200)."""
    if failed_state:
        return request in _NOT_UPDATE
    if status is None:
        return request in _CREATES
    if status in (200, 202):
        return False
    if status == 201:
        return malformed and request in _CREATES
    if 200 <= status <= 299 or 500 <= status <= 599:
        return request in _NOT_UPDATE
    return False  # 408, every other 4xx, and statuses OSB gives no meaning (1xx, 3xx)


def needs_orphan_mitigation_after(request: Request, error: BrokerError) -> bool:
    """The same decision from what the client raised for ``request`` (or its polling).

    An operation that ran past the maximum polling duration (``OperationTimeout``) counts as failed, as OSB
    says; ``BrokerUnreachable`` never reached the broker. ``MalformedResponse`` carries the status it came
    with."""
    if isinstance(error, OperationFailed | OperationTimeout):
        return needs_orphan_mitigation(request, status=200, failed_state=True)
    if isinstance(error, ResponseLost):
        return needs_orphan_mitigation(request, status=None)
    if isinstance(error, OSBError):
        return needs_orphan_mitigation(request, status=error.status, malformed=isinstance(error, MalformedResponse))
    return False
