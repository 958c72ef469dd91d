"""What a failure that stops an object says on that object: one reason and one message that names the fix.

Every kind's reconcile runs under the runtime's error table (``reconciler.failures``), which decides how a key is
retried. This module decides what the *user* is told: the runtime hands every failure it does not re-read at once
(a conflict) here, as a :class:`Trouble` — a plain value the edge made of the exception — and writes the answer on
the reconciled object as its Ready condition (False) and a Warning Event (``controller.runtime.showing``). So a failure
no kind foresaw still reaches the object, with the same words whichever kind met it:

=================================================  ================================  =================================
trouble                                            reason                            the fix the message names
=================================================  ================================  =================================
403 to a namespace's own account (its ``opbroker``)  ``NamespaceNotOnboarded``         ``opbroker namespace onboard NS``
403 to another account (a plan's)                  ``AccountLacksRight``             the rule to grant, or onboard
403 into a namespace being deleted                 ``NamespaceTerminating``          wait, or recreate it elsewhere
403 otherwise                                      ``Forbidden``                     grant the right
404 "could not find the requested resource",       ``KindNotInstalled``              install the operator / its CRD
  or a kind the API server does not serve
another 404 (a namespace, a referred object)       ``ReconcileFailed``               create what is missing
any status, denied by an admission webhook or      ``AdmissionDenied``               change what is refused, or the
  a ValidatingAdmissionPolicy                                                          policy (the cluster's admin)
400, 413, 422 (a schema, a field)                  ``ObjectInvalid``                 fix the template or parameters
429, 5xx of the API server, no answer               ``APIServerUnavailable``          none: retried (names the wait)
a broker's 5xx or an error status                  ``BrokerFailed``                  the broker's operator
a broker that timed out or cannot be reached       ``BrokerUnreachable``             check the broker's URL/health
a template that does not render                    ``RenderFailed``                  fix the plan's template
anything else                                      ``ReconcileFailed``               the controller's log has the trace
=================================================  ================================  =================================

An authorizer's 403 is read as a :class:`~.refusals.Denial` (account, verb, resource, group, namespace: the request's
attributes, never a value), and the message names the right and the RBAC rule to grant; a refusal of an object names
its kind and apiVersion. Messages never carry a value: the API server's text is masked as a refusal's is
(:func:`.refusals.masked`: every quoted string but the names of the object, the account and the namespace and what
the API server names of the request, and every ``Invalid value:`` given unquoted); a broker's and a renderer's texts
come already redacted by their clients. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from opbroker import osbclient
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.refusals import (
    MASK,
    NOT_SERVED,
    Denial,
    Refusal,
    denial_of,
    explanation,
    masked,
    request_words,
    terminating_namespace,
)
from opbroker.controller.core.views import ApiStatus

SHOWN_REASONS = frozenset(
    {
        Reason.NAMESPACE_NOT_ONBOARDED,
        Reason.ACCOUNT_LACKS_RIGHT,
        Reason.FORBIDDEN,
        Reason.NAMESPACE_TERMINATING,
        Reason.KIND_NOT_INSTALLED,
        Reason.ADMISSION_DENIED,
        Reason.OBJECT_INVALID,
        Reason.API_SERVER_UNAVAILABLE,
        Reason.BROKER_FAILED,
        Reason.BROKER_UNREACHABLE,
        Reason.RECONCILE_FAILED,
    }
)
"""Every reason :func:`explain` gives but ``RenderFailed`` (which the plans give too)."""
NOT_SHOWN = frozenset({Reason.API_SERVER_UNAVAILABLE})
"""Failures the runtime does not write on the object: the API server's own overload or absence is every object's at
once and nothing any of them can fix — showing it would cost a read, a write and an Event per object, sent to the
API server that is struggling (the queue retries it with backoff; the log has one line per key)."""
MAX_SHOWN = 900
"""A shown message is cut here (the condition keeps 1024): the fix is written first, so it survives the cut."""


class Source(StrEnum):
    """Who failed."""

    API = "api"
    """The Kubernetes API server answered an error status."""
    API_UNREACHABLE = "api-unreachable"
    """The API server did not answer (transport error, TLS)."""
    NOT_SERVED = "not-served"
    """The API server does not serve a kind (discovery: its CRD is not installed)."""
    BROKER = "broker"
    """A service broker answered an error status, or an answer the client cannot read."""
    BROKER_UNREACHABLE = "broker-unreachable"
    """A service broker could not be reached or did not answer in time."""
    RENDER = "render"
    """A plan's template did not render."""
    OTHER = "other"
    """Anything else (a bug: the controller's log has its traceback)."""


@dataclass(frozen=True)
class Trouble:
    """A failure as a plain value (the edge makes it of the exception: ``reconciler.failures.trouble_of``)."""

    source: Source
    message: str
    """The failure's own words: the API server's Status message, the broker client's (redacted) text, the
    renderer's; never a response body."""
    status: int | None = None
    """The HTTP status, when there was one."""
    masked: bool = False
    """The message is masked already (a refusal described with the object's values masked)."""
    timed_out: bool = False
    denial: Denial | None = None
    """What an authorizer's 403 names (read from the API server's own words, before any masking)."""
    terminating: str | None = None
    """The namespace a 403 says is being deleted."""
    subject: str | None = None
    """The refused object's kind and apiVersion, when a refusal of an object is what failed."""


def refused_trouble(refusal: Refusal) -> Trouble:
    """A refusal of an object (the door's masked description) as a Trouble."""
    return Trouble(
        Source.API,
        refusal.describe(),
        status=refusal.status,
        masked=True,
        denial=refusal.denial,
        terminating=refusal.terminating,
        subject=refusal.subject,
    )


def api_trouble(status: int, body: object) -> Trouble:
    """An API server's error answer to a request that was not a write of one object (a read, a status patch)."""
    answer = ApiStatus.of(body)
    message = explanation(status, answer) or ""
    return Trouble(
        Source.API,
        message,
        status=status,
        denial=denial_of(message) if status == 403 else None,
        terminating=terminating_namespace(message) if status == 403 else None,
    )


@dataclass(frozen=True)
class Shown:
    """What the object shows: its Ready condition's reason and message (the Event says the same)."""

    reason: Reason
    message: str


def broker_trouble(error: osbclient.BrokerError) -> Trouble:
    """A service broker's failure (what the OSB client raised: its text redacted by the client) as a Trouble."""
    if isinstance(error, osbclient.TransportFailure):
        return Trouble(Source.BROKER_UNREACHABLE, str(error), timed_out=error.timed_out)
    status = error.status if isinstance(error, osbclient.OSBError) else None
    return Trouble(Source.BROKER, str(error), status=status)


def broker_message(error: osbclient.BrokerError) -> str:
    """What a broker's failure says on the object (the fix first, then the client's words)."""
    return explain(broker_trouble(error)).message


_WEBHOOK = re.compile(r'admission webhook "(?P<name>[^"]+)" denied the request')
_POLICY = re.compile(r"ValidatingAdmissionPolicy '(?P<name>[^']+)'(?: with binding '[^']+')? denied request")
_NOT_FOUND_RESOURCE = NOT_SERVED
#: A value the API server prints unquoted after ``Invalid value:`` (a number, ``&value.valueUnstructured{...}``):
#: up to the ``: `` that starts the explanation (or the end of the cause).
_UNQUOTED_VALUE = re.compile(r"(Invalid value: )(?!\")[^\n\]]*?(?=: |, |\]|$)")
INVALID_STATUSES = frozenset({400, 413, 422})
UNAVAILABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


def clean(message: str, keep: tuple[str, ...] = ()) -> str:
    """The API server's ``message`` with every value masked (quoted strings but ``keep`` and what it names of the
    request — :func:`.refusals.request_words`; unquoted invalid values)."""
    words = request_words(ApiStatus(message=message, reason=None))
    return masked(_UNQUOTED_VALUE.sub(lambda m: m.group(1) + MASK, message), keep=(*keep, *words))


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


#: How to onboard a namespace from the command line (the platform's act: ``cli/namespaces.py``).
ONBOARD_COMMAND = "opbroker namespace onboard {namespace}"


def _forbidden(trouble: Trouble) -> Shown:
    said = trouble.message if trouble.masked else clean(trouble.message)
    if trouble.terminating is not None:
        return Shown(
            Reason.NAMESPACE_TERMINATING,
            f'namespace "{trouble.terminating}" is being deleted: nothing new can be written into it. Wait until it '
            "is gone and create it again (then this is retried on its own), or delete this object. It said: " + said,
        )
    denial = trouble.denial
    if denial is None:
        return Shown(
            Reason.FORBIDDEN,
            "the API server refused a request (403 Forbidden): grant the identity opbroker acts as the right it "
            f"names: {said}",
        )
    where = denial.namespace
    place = f'in namespace "{where}"' if where else "at the cluster scope"
    account = denial.account
    if account is not None and where is not None and account[0] == where:
        return Shown(
            Reason.NAMESPACE_NOT_ONBOARDED,
            f'namespace "{where}" is not onboarded: its account "{account[1]}" may not {denial.right} there. Onboard '
            f"the namespace (`{ONBOARD_COMMAND.format(namespace=where)}`: the platform's onboarding binds that "
            f"account there), then this is retried on its own. It said: {said}",
        )
    if where is None:
        fix = f"grant it that right — the rule {denial.rule} in a ClusterRole bound to it"
    elif account is None:
        fix = f'grant it that right — the rule {denial.rule} in a Role bound to it in namespace "{where}"'
    else:
        fix = (
            f"grant it that right — the rule {denial.rule} in the ClusterRole of the plan's account, or in a Role "
            f'bound to it there — or onboard namespace "{where}" (`{ONBOARD_COMMAND.format(namespace=where)} '
            f"--control-plane {account[0]}`), which binds the control plane's plan accounts there"
        )
    return Shown(
        Reason.ACCOUNT_LACKS_RIGHT,
        f'the account "{denial.user}" may not {denial.right} {place}: {fix}; then this is retried on its own. '
        f"It said: {said}",
    )


def _admission(trouble: Trouble) -> Shown | None:
    webhook, policy = _WEBHOOK.search(trouble.message), _POLICY.search(trouble.message)
    if webhook is None and policy is None:
        return None
    who = (
        f'admission webhook "{webhook["name"]}"'
        if webhook
        else f'ValidatingAdmissionPolicy "{policy and policy["name"]}"'
    )
    # A policy's words are whatever it was written to say, values included, quoted or not: only a message masked
    # with the refused object's own values (a refusal: ``trouble.masked``) is shown; else its name alone.
    said = f" It said: {trouble.message}" if trouble.masked else ""
    of = f" of {trouble.subject}" if trouble.subject else ""
    return Shown(
        Reason.ADMISSION_DENIED,
        f"the cluster's {who} refused a write{of}: change what it refuses (the plan's template or the request's "
        f"parameters), or ask the cluster's administrator about the policy.{said}",
    )


def _api(trouble: Trouble) -> Shown:
    status = trouble.status
    denied = _admission(trouble)
    if denied is not None:
        return denied
    text = trouble.message if trouble.masked else clean(trouble.message)
    if status == 403:
        return _forbidden(trouble)
    if status == 404 and _NOT_FOUND_RESOURCE in trouble.message:
        needed = f" ({trouble.subject})" if trouble.subject else ""
        return Shown(
            Reason.KIND_NOT_INSTALLED,
            f"the API server does not serve a kind this needs{needed} (404: its CRD is not installed): install the "
            f"operator (or its CRDs) that serves it, then this is retried on its own. It said: {text}",
        )
    if status == 404:
        return Shown(
            Reason.RECONCILE_FAILED,
            "something this needs does not exist (404: the namespace written into, an object referred to): create "
            f"it, then this is retried on its own. It said: {text}",
        )
    if status in INVALID_STATUSES:
        return Shown(
            Reason.OBJECT_INVALID,
            f"the API server refused an object as invalid ({status}): fix the plan's template or the request's "
            f"parameters so it passes the schema of {trouble.subject or 'its kind'}. It said: {text}",
        )
    if status in UNAVAILABLE_STATUSES:
        return Shown(
            Reason.API_SERVER_UNAVAILABLE,
            f"the API server answered {status}: nothing to fix here, retried with backoff. It said: {text}",
        )
    return Shown(
        Reason.RECONCILE_FAILED,
        f"the API server answered {status}: see the controller's log for the request; retried with backoff. "
        f"It said: {text}",
    )


def explain(trouble: Trouble) -> Shown:
    """The reason and the message (fix first, then the failure's own words) ``trouble`` shows on its object."""
    match trouble.source:
        case Source.API:
            shown = _api(trouble)
        case Source.API_UNREACHABLE:
            shown = Shown(
                Reason.API_SERVER_UNAVAILABLE,
                f"the API server did not answer ({trouble.message}): nothing to fix here, retried with backoff",
            )
        case Source.NOT_SERVED:
            shown = Shown(
                Reason.KIND_NOT_INSTALLED,
                f"{trouble.message}: install the operator (or its CRDs) that serves it, then this is retried on its "
                "own",
            )
        case Source.BROKER_UNREACHABLE:
            late = "did not answer in time" if trouble.timed_out else "could not be reached"
            shown = Shown(
                Reason.BROKER_UNREACHABLE,
                f"the service broker {late}: check the Broker's URL and that the broker is up; retried with backoff. "
                f"{trouble.message}",
            )
        case Source.BROKER:
            failing = trouble.status is not None and trouble.status >= 500
            shown = Shown(
                Reason.BROKER_FAILED,
                (
                    "the service broker failed: its operator must look at it; retried with backoff. "
                    if failing
                    else "the service broker refused the call: check the request against the broker's catalog. "
                )
                + trouble.message,
            )
        case Source.RENDER:
            shown = Shown(
                Reason.RENDER_FAILED, f"a plan's template did not render: fix the template. {trouble.message}"
            )
        case _:
            shown = Shown(
                Reason.RECONCILE_FAILED,
                f"the controller failed on this object ({trouble.message}; the controller's log has the trace): "
                "retried with backoff",
            )
    return Shown(shown.reason, _cut(shown.message))
