"""What the controller makes of the API server refusing an object it applies, and how it says so.

A rendered object the API server refuses is the plan's (or the request's) fault, not the cluster's, and
retrying the same object cannot help: it ends the operation ``failed`` at once, with the API server's
own explanation. Which refusals count as what:

* **permanent** — 400 BadRequest, 413 RequestEntityTooLarge, 422 Invalid (an invalid name, a schema
  violation, an immutable field): the operation fails now (reason ``ApplyRefused``).
* **counted** — 403 Forbidden (RBAC, a terminating namespace), 404 NotFound (the operator's CRD or the
  target namespace not there yet): these can be fixed outside the request, so they are retried with
  backoff, each one counted; past ``--error-threshold`` the operation fails (``GaveUp``) naming the last.
* **transient** — 409 Conflict (re-read and retry), 429 and 5xx, connection errors: the API server's
  state, not the object's; retried with backoff for as long as it takes.

The explanation never carries values: a rendered value may be a password, and the API server echoes values
in more than one format — quoted (``Invalid value: "..."``), but also unquoted (server-side apply prints a
number where a string belongs as ``got &value.valueUnstructured{Value:4815162342}``; an admission policy's or
webhook's message says whatever it was written to say). So masking does not depend on quoting: every value
the refused object carries (each leaf string and number, with its escaped, per-line and base64 forms, and a
Secret's decoded ``data``) is masked wherever it occurs in the message, and then every quoted string left is
masked too — except the object's own kind, name and namespace, which are no secret and the most useful part, and
what the API server names of the *request* (:func:`request_words`): the resource and group of the Status's
``details``, and the parts of an authorizer's denial (:class:`Denial`: the account, verb, resource, group and
namespace). Those come from the request's URL and its identity, never from the object's values, and they are
exactly what the reader needs to write the grant. An empty quoted string ``""`` (the core group) is never masked:
it reveals nothing.

Pure.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from opbroker.controller.core.views import ApiStatus, ObjectView
from opbroker.kubeclient.wire import JsonObject, string_map_of

PERMANENT_STATUSES = frozenset({400, 413, 422})
COUNTED_STATUSES = frozenset({403, 404})
MAX_MESSAGE = 1000
#: Shortest value of the object masked wherever it occurs in a message. Shorter ones ("1", "TCP", "v1") occur
#: in every message as ordinary words and numbers: masking them would leave nothing to read. (A shorter value
#: the API server quotes is still masked, as every quoted string is.)
MIN_MASKED = 4
#: How much of the API server's message is read at most (characters): the part shown is MAX_MESSAGE; masking
#: scans a bounded text, so a huge message costs bounded time (each value is searched for in it).
MAX_SCANNED = 16 * 1024
MASK = "…"
#: A double-quoted string, or one left open at the end (cut by MAX_SCANNED, or never closed): masked to the end.
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*(?:(")|\\?$)')


#: An authorizer's 403, as the API server words it (``responsewriters.forbiddenMessage``, wrapped by
#: ``NewForbidden``): ``<resource>[.<group>] ["<name>"] is forbidden: User "<user>" cannot <verb> resource
#: "<resource>[/<sub>]" in API group "<group>" (in the namespace "<ns>" | at the cluster scope)[: <why>]``.
#: Anchored at the message's start: an admission webhook's or policy's words (which say anything, values included)
#: always start with their own prefix (``admission webhook "w" denied the request: ``, ``... is forbidden:
#: ValidatingAdmissionPolicy``), so a denial quoted inside them is never read as the API server's.
_DENIAL = re.compile(
    r'(?:[\w.-]+(?: "(?:[^"\\]|\\.)*")? is forbidden: )?'
    r'User "(?P<user>[^"\\]+)" cannot (?P<verb>[a-z]+) resource "(?P<resource>[a-z0-9.-]+(?:/[a-z0-9.-]+)?)"'
    r' in API group "(?P<group>[a-z0-9.-]*)"(?: in the namespace "(?P<namespace>[a-z0-9.-]+)"| at the cluster scope)'
)
#: An admission webhook's denial, as the API server words it (``webhookerrors.ToStatusErr``): its name is the
#: webhook configuration's, no value of the object (what follows is the webhook's own words, masked).
_WEBHOOK_DENIAL = re.compile(r'admission webhook "(?P<name>[a-z0-9.-]+)" denied the request')
#: What a resource (``configmaps``, ``deployments/scale``) or an API group (``apps``, ``demo.opbroker.io``) looks
#: like: a Status's ``details`` naming anything else is not taken as one.
_RESOURCE_WORD = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(/[a-z0-9]+)?")
#: The API server's words for a write into a namespace being deleted (``NamespaceLifecycle``).
#: Anchored like :data:`_DENIAL`.
_TERMINATING = re.compile(
    r'(?:[\w.-]+(?: "(?:[^"\\]|\\.)*")? is forbidden: )?'
    r"unable to create new content in namespace (?P<namespace>[a-z0-9.-]+) because it is being terminated"
)


@dataclass(frozen=True)
class Denial:
    """What an authorizer's 403 names: who may not do what, where. The API server builds it from the request's
    attributes (its identity and URL), never from the object's values: every part is shown."""

    user: str
    verb: str
    resource: str
    """The plural (``configmaps``), with ``/<subresource>`` when the request was for one."""
    group: str
    """The API group: ``""`` for the core group."""
    namespace: str | None
    """None: at the cluster scope."""

    @property
    def words(self) -> tuple[str, ...]:
        return (self.user, self.resource, self.group, *((self.namespace,) if self.namespace else ()))

    @property
    def right(self) -> str:
        """The right it lacks, as a reader writes a grant: ``create configmaps (API group "", the core group)``."""
        group = f'API group "{self.group}"' + (", the core group" if not self.group else "")
        return f"{self.verb} {self.resource} ({group})"

    @property
    def rule(self) -> str:
        """The RBAC rule that grants it (a Role's or ClusterRole's ``rules`` entry, as YAML flow)."""
        return f'{{apiGroups: ["{self.group}"], resources: ["{self.resource}"], verbs: ["{self.verb}"]}}'

    @property
    def account(self) -> tuple[str, str] | None:
        """(namespace, name) when the user is a service account."""
        prefix = "system:serviceaccount:"
        if not self.user.startswith(prefix) or self.user.count(":") != 3:
            return None
        namespace, name = self.user[len(prefix) :].split(":")
        return namespace, name


def denial_of(message: str | None) -> Denial | None:
    """The :class:`Denial` an API server's 403 message states (None: the message is not an authorizer's)."""
    found = _DENIAL.match(message or "")
    if found is None:
        return None
    return Denial(found["user"], found["verb"], found["resource"], found["group"], found["namespace"])


def terminating_namespace(message: str | None) -> str | None:
    """The namespace a 403 says is being deleted (None: the refusal is not that)."""
    found = _TERMINATING.match(message or "")
    return found["namespace"] if found else None


def request_words(answer: ApiStatus, values: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """What the API server names of the request in its answer, shown unmasked: a denial's parts and a denying
    webhook's name (trusted: built from the request and the cluster's configuration, and read at the message's
    start only), and the ``details`` resource and group when they look like one and are not a value of the
    object (a webhook's answer is passed through whole, its details included: they say whatever it wrote)."""
    denial = denial_of(answer.message)
    detailed = tuple(
        word
        for word in (answer.resource, answer.group)
        if word and _RESOURCE_WORD.fullmatch(word) and word not in values
    )
    webhook = _WEBHOOK_DENIAL.match(answer.message or "")
    return (*(denial.words if denial else ()), *detailed, *((webhook["name"],) if webhook else ()))


NOT_SERVED = "the server could not find the requested resource"
"""The API server's words for a path it does not serve (a kind whose CRD is not installed)."""


def explanation(status: int | None, answer: ApiStatus) -> str | None:
    """The API server's message; for a 404 that carries no Status at all, :data:`NOT_SERVED`: a path the API server
    does not serve is answered by its mux as plain text (``404 page not found``) — a kind whose CRD went away
    since discovery said it was served (a missing namespace or object is a Status, ``NotFound``)."""
    if answer.message:
        return answer.message
    return NOT_SERVED if status == 404 and answer.reason is None else None


class Severity(StrEnum):
    PERMANENT = "permanent"
    COUNTED = "counted"
    TRANSIENT = "transient"


def severity(status: int | None) -> Severity:
    if status in PERMANENT_STATUSES:
        return Severity.PERMANENT
    if status in COUNTED_STATUSES:
        return Severity.COUNTED
    return Severity.TRANSIENT


def _leaves(value: object) -> Iterator[str | int | float]:
    """Every leaf (string, number) of a wire object: values only, not keys (field names are no secret)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        yield value


def _decoded(value: str) -> str | None:
    """The text a base64 value (a Secret's ``data``) stands for, if it is base64 of UTF-8 text."""
    try:
        return base64.b64decode(value, validate=True).decode()
    except (binascii.Error, ValueError):
        return None


def _forms(text: str) -> Iterator[str]:
    """The ways the API server may print ``text``: as is, escaped (Go's %q and JSON escape quotes, backslashes
    and newlines), line by line (a message may quote one line of a certificate or a config file), and base64
    (a Secret's ``stringData`` is echoed as ``data``)."""
    if len(text) < MIN_MASKED:
        return
    yield text
    yield json.dumps(text, ensure_ascii=False)[1:-1]
    yield from (line.strip() for line in text.splitlines())
    yield base64.b64encode(text.encode()).decode().rstrip("=")


def echoed_values(manifest: JsonObject) -> frozenset[str]:
    """Every value of ``manifest`` (the object as sent) that masking hides wherever it occurs, in every form
    the API server may print it (see :func:`_forms`), each at least :data:`MIN_MASKED` long."""
    texts: list[str] = [str(leaf) for leaf in _leaves(manifest)]
    if manifest.get("kind") == "Secret":
        texts += [d for d in map(_decoded, string_map_of(manifest.get("data")).values()) if isinstance(d, str)]
    if manifest.get("kind") == "ConfigMap":
        texts += [d for d in map(_decoded, string_map_of(manifest.get("binaryData")).values()) if isinstance(d, str)]
    return frozenset(form for text in texts for form in _forms(text) if len(form) >= MIN_MASKED)


def _occurrences(text: str, needles: Iterable[str]) -> list[tuple[int, int]]:
    """Every (start, end) at which one of ``needles`` occurs in ``text``, overlapping ones included. A needle
    whose first MIN_MASKED characters occur nowhere in the text is not searched for (many values, short text)."""
    grams = {text[i : i + MIN_MASKED] for i in range(len(text) - MIN_MASKED + 1)}
    spans: list[tuple[int, int]] = []
    for needle in needles:
        if needle[:MIN_MASKED] not in grams:
            continue
        start = text.find(needle)
        while start != -1:
            spans.append((start, start + len(needle)))
            start = text.find(needle, start + 1)
    return spans


def _mask_values(text: str, values: Iterable[str], keep: tuple[str, ...]) -> str:
    """``text`` with every occurrence of every value replaced by :data:`MASK` (overlapping occurrences merged,
    so no part of either survives), except where an occurrence lies wholly inside an occurrence of a ``keep``
    string (a value that is part of the object's own name is no secret: the name is shown)."""
    kept = _occurrences(text, [k for k in keep if len(k) >= MIN_MASKED])
    spans = sorted(
        (start, end)
        for start, end in _occurrences(text, values)
        if not any(k_start <= start and end <= k_end for k_start, k_end in kept)
    )
    out: list[str] = []
    at = 0
    for start, end in spans:
        if end <= at:
            continue
        if start >= at:
            out.append(text[at:start])
            out.append(MASK)
        at = end
    out.append(text[at:])
    return "".join(out)


def masked(message: str, keep: tuple[str, ...] = (), values: Iterable[str] = ()) -> str:
    """``message`` with every one of ``values`` masked wherever it occurs (quoted or not), then every
    double-quoted string left replaced by ``"…"`` unless it is one of ``keep``. A message longer than
    :data:`MAX_SCANNED` is cut first, a value or quoted string cut open at the end masked to the end."""
    values = tuple(values)
    if len(message) > MAX_SCANNED:
        # A value cut open here would not match: drop what could be the start of one.
        longest = max((len(v) for v in values), default=0)
        message = message[: max(0, MAX_SCANNED - longest)] + MASK
    kept = {json.dumps(k) for k in keep if k}

    def mask(match: re.Match[str]) -> str:
        quoted = match.group(0)
        if quoted in kept or quoted == '""':
            return quoted
        return f'"{MASK}"' if match.group(1) else f'"{MASK}'

    return _QUOTED.sub(mask, _mask_values(message, values, tuple(k for k in keep if k)))


@dataclass(frozen=True)
class Refusal:
    """One refusal of one object, described without any of its values."""

    status: int
    reason: str
    kind: str
    namespace: str | None
    name: str
    message: str
    api_version: str = ""
    """The refused object's apiVersion (its group and version): empty when the caller did not know it."""
    denial: Denial | None = None
    """What an authorizer's 403 names (who may not do what, where): the grant to add."""
    terminating: str | None = None
    """The namespace a 403 says is being deleted."""

    @property
    def severity(self) -> Severity:
        return severity(self.status)

    @property
    def subject(self) -> str:
        """The refused object's kind, with its apiVersion when known: ``Database (demo.opbroker.io/v1alpha1)``."""
        return f"{self.kind} ({self.api_version})" if self.api_version else self.kind

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"the API server refused {self.kind} {where} ({self.status} {self.reason}): {self.message}"


def _kind_words(kind: str, api_version: str | None, answer: ApiStatus, values: frozenset[str]) -> tuple[str, ...]:
    """The words naming the refused object's kind that a message may carry: its API group, the kind and the
    resources the answer names qualified by it, as the API server prints them (``Deployment.apps "web" is
    invalid``, ``deployments.apps "web" is forbidden``) — all from the request, none a value."""
    words = request_words(answer, values)
    group = api_version.rpartition("/")[0] if api_version else ""
    if not group:
        return words
    return (*words, group, f"{kind}.{group}", *(f"{word}.{group}" for word in words if _RESOURCE_WORD.fullmatch(word)))


def refusal(status: int, body: object, manifest: JsonObject, keep: tuple[str, ...] = ()) -> Refusal:
    """The :class:`Refusal` for an error answer (``body``: the API server's Status, as text or parsed) to
    a write of ``manifest``; ``keep``: more quoted strings that are no secret (the identity acted as, which an
    RBAC refusal names and its reader needs)."""
    sent, answer = ObjectView.of(manifest), ApiStatus.of(body)
    name, namespace = sent.meta.name, sent.meta.namespace or None
    message = explanation(status, answer) or "no explanation given"
    kind = sent.kind or "object"
    values = echoed_values(manifest)
    named = (name, namespace or "", kind, sent.api_version, *keep, *_kind_words(kind, sent.api_version, answer, values))
    text = masked(message, keep=named, values=values)
    if len(text) > MAX_MESSAGE:
        text = text[: MAX_MESSAGE - 1] + "…"
    return Refusal(
        status=status,
        reason=answer.reason or "Unknown",
        kind=kind,
        namespace=namespace,
        name=name,
        message=text,
        api_version=sent.api_version or "",
        denial=denial_of(answer.message) if status == 403 else None,
        terminating=terminating_namespace(answer.message) if status == 403 else None,
    )


def masked_status(status: int | None, body: object, manifest: JsonObject, keep: tuple[str, ...] = ()) -> str:
    """An error answer to a write of ``manifest`` that is not a refusal of the object (409, 429, 5xx: retried),
    as a Status whose message is masked like a refusal's and whose details (each cause quotes a value) are
    dropped: the answer's text goes into logs and events when the retries give up."""
    found = refusal(status or 0, body, manifest, keep)
    return json.dumps({"kind": "Status", "code": status, "reason": found.reason, "message": found.message})
