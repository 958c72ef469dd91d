"""The edge of :mod:`opbroker.controller.core.shown_failures`: a reconcile's exception as a plain :class:`Trouble`.

Only what may be shown is taken: the API server's Status ``message`` (never its details, which quote the values
refused), a refusal's masked description, the OSB client's and the renderer's texts (redacted by them).
"""

from __future__ import annotations

import urllib3
from kubernetes.client.exceptions import ApiException

from opbroker import osbclient
from opbroker.controller.core.shown_failures import (
    NOT_SHOWN,
    Shown,
    Source,
    Trouble,
    api_trouble,
    broker_trouble,
    explain,
    refused_trouble,
)
from opbroker.controller.runtime.kube import KubeError, Refused
from opbroker.controller.runtime.outcomes import TemporaryError
from opbroker.rendering import RenderError

NOT_SERVED = "does not serve"
"""How the door words a kind the API server does not serve (``Kube._resource``)."""


def trouble_of(exc: BaseException) -> Trouble | None:
    """``exc`` (or the cause a :class:`TemporaryError` was raised from) as a Trouble; None for a TemporaryError of
    a kind's own words (a plan's ``Retry``: the kind wrote its condition and Event before raising it)."""
    if isinstance(exc, TemporaryError) and exc.__cause__ is None:
        return None
    cause = exc.__cause__ if isinstance(exc, TemporaryError) and exc.__cause__ is not None else exc
    if isinstance(cause, Refused):
        return refused_trouble(cause.refusal)
    if isinstance(cause, ApiException):
        if not cause.status:
            return Trouble(Source.API_UNREACHABLE, cause.reason or "no answer")
        found = api_trouble(cause.status, cause.body)
        return found if found.message else Trouble(Source.API, str(cause.reason or ""), status=cause.status)
    if isinstance(cause, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError):
        return Trouble(Source.API_UNREACHABLE, type(cause).__name__)
    if isinstance(cause, KubeError) and NOT_SERVED in str(cause):
        return Trouble(Source.NOT_SERVED, str(cause))
    if isinstance(cause, osbclient.BrokerError):
        return broker_trouble(cause)
    if isinstance(cause, RenderError):
        return Trouble(Source.RENDER, str(cause))
    # Anything else says whatever its author put in it (a validation error quotes its input): its type only.
    return Trouble(Source.OTHER, type(cause).__name__)


def shown_for(exc: BaseException) -> Shown | None:
    """What ``exc`` shows on the object it stopped (None: its kind showed it already, or it is not the object's:
    :data:`~opbroker.controller.core.shown_failures.NOT_SHOWN`)."""
    trouble = trouble_of(exc)
    if trouble is None:
        return None
    shown = explain(trouble)
    return None if shown.reason in NOT_SHOWN else shown
