"""The OSB paths the client sends, and the one rule for the ids in them.

An instance or binding id comes from whoever asked for it — a tenant's ``spec.externalID``, a Pulumi input —
and lands in a URL path. Put there verbatim, ``../<victim>/service_bindings/x`` becomes (httpx resolves dot
segments) a bind on another tenant's instance, and ``x/../<victim>`` that instance itself. So every path is
built here, and nowhere else:

* an id is first checked against :data:`ID_RULE` (:func:`check_id`) and refused with :class:`InvalidID` —
  nothing is sent — when it is empty, longer than :data:`MAX_ID_BYTES` bytes of UTF-8, holds ``/``, ``?``,
  ``#``, ``%`` or a control character, or is ``.`` or ``..``;
* then percent-encoded as one path segment (``quote(id, safe="")``): defence in depth, so that whatever the
  rule lets through (a space, a non-ASCII letter) is still exactly one segment on the wire.

The rule is also the resource model's (``opbroker.api.osb.OSBId``): the API server refuses a bad id on create,
and the Service Catalog controller refuses one that predates that (``InvalidExternalID``). OSB ids are
typically GUIDs (36 characters); 255 bytes leaves room for any other scheme and keeps a URL holding two of them
(percent-encoded, at most 3 times 255 characters each) far below every server's limit.

Query parameters (``operation``, ``service_id``, ``plan_id``) are not built here: httpx encodes them.
"""

from __future__ import annotations

import re
import urllib.parse

from opbroker.osbclient.errors import BrokerError

#: The longest id, in bytes of its UTF-8 encoding.
MAX_ID_BYTES = 255
_FORBIDDEN = r"/?#%\x00-\x1f\x7f-\x9f"
#: What an id may be, as a regular expression both Python's ``re`` (with ``fullmatch``) and RE2 (the API
#: server's CEL ``matches``, anchored by ``^…$``) read alike: no forbidden character, and not ``.`` or ``..``
#: (no look-ahead in RE2: "starts with a non-dot, or one dot and a non-dot, or two dots and anything").
ID_PATTERN = rf"^(?:[^.{_FORBIDDEN}][^{_FORBIDDEN}]*|\.[^.{_FORBIDDEN}][^{_FORBIDDEN}]*|\.\.[^{_FORBIDDEN}]+)$"
#: The rule in words: every refusal names it.
ID_RULE = (
    f"an OSB id is 1 to {MAX_ID_BYTES} bytes (UTF-8) without '/', '?', '#', '%' or control characters, "
    "and is not '.' or '..'"
)
_ID = re.compile(ID_PATTERN)


class InvalidID(BrokerError, ValueError):
    """An instance or binding id that breaks :data:`ID_RULE`: nothing was sent. Permanent (``classify``); a
    ``ValueError`` too, so the resource model's validators report it as a validation error."""

    def __init__(self, what: str, value: str, problem: str) -> None:
        self.value = value
        super().__init__(what, f"{what}: {problem}")


def id_problem(value: str) -> str | None:
    """Why ``value`` may not be an OSB id (a sentence naming the rule), None when it may."""
    shown = repr(value) if len(value) <= 64 else f"{value[:64]!r}..."
    if not value:
        return f"the id is empty: {ID_RULE}"
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{shown} is not UTF-8 text: {ID_RULE}"
    if len(encoded) > MAX_ID_BYTES:
        return f"{shown} is {len(encoded)} bytes long: {ID_RULE}"
    if not _ID.fullmatch(value):
        return f"{shown} is not a valid id: {ID_RULE}"
    return None


def check_id(value: str, *, what: str = "id") -> str:
    """``value`` when it is a valid OSB id; raises :class:`InvalidID` (naming ``what``) otherwise."""
    problem = id_problem(value)
    if problem is not None:
        raise InvalidID(what, value, problem)
    return value


def _segment(value: str, what: str) -> str:
    return urllib.parse.quote(check_id(value, what=what), safe="")


def instance(instance_id: str) -> str:
    """``/v2/service_instances/{instance_id}``."""
    return f"/v2/service_instances/{_segment(instance_id, 'instance id')}"


def instance_last_operation(instance_id: str) -> str:
    """``/v2/service_instances/{instance_id}/last_operation``."""
    return f"{instance(instance_id)}/last_operation"


def binding(instance_id: str, binding_id: str) -> str:
    """``/v2/service_instances/{instance_id}/service_bindings/{binding_id}``."""
    return f"{instance(instance_id)}/service_bindings/{_segment(binding_id, 'binding id')}"


def binding_last_operation(instance_id: str, binding_id: str) -> str:
    """``/v2/service_instances/{instance_id}/service_bindings/{binding_id}/last_operation``."""
    return f"{binding(instance_id, binding_id)}/last_operation"
