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

The explanation never carries values: the API server quotes the offending value (``Invalid value:
"..."``), and a rendered value may be a password. Every quoted string in its message is masked, except the
object's own name and namespace, which are no secret and the most useful part.

Pure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

PERMANENT_STATUSES = frozenset({400, 413, 422})
COUNTED_STATUSES = frozenset({403, 404})
MAX_MESSAGE = 1000
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')


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


def masked(message: str, keep: tuple[str, ...] = ()) -> str:
    """``message`` with every double-quoted string replaced by ``"…"`` unless it is one of ``keep``."""
    kept = {json.dumps(k) for k in keep if k}

    def mask(match: re.Match[str]) -> str:
        return match.group(0) if match.group(0) in kept else '"…"'

    return _QUOTED.sub(mask, message)


@dataclass(frozen=True)
class Refusal:
    """One refusal of one object, described without any of its values."""

    status: int
    reason: str
    kind: str
    namespace: str | None
    name: str
    message: str

    @property
    def severity(self) -> Severity:
        return severity(self.status)

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"the API server refused {self.kind} {where} ({self.status} {self.reason}): {self.message}"


def refusal(status: int, body: Any, manifest: dict[str, Any], keep: tuple[str, ...] = ()) -> Refusal:
    """The :class:`Refusal` for an error answer (``body``: the API server's Status, as text or parsed) to
    a write of ``manifest``; ``keep``: more quoted strings that are no secret (the identity acted as, which an
    RBAC refusal names and its reader needs)."""
    meta = manifest.get("metadata") or {}
    name, namespace = str(meta.get("name") or ""), meta.get("namespace")
    parsed: dict[str, Any] = {}
    if isinstance(body, dict):
        parsed = body
    elif isinstance(body, (str, bytes)):
        try:
            loaded = json.loads(body)
        except ValueError:
            loaded = None
        parsed = loaded if isinstance(loaded, dict) else {}
    message = str(parsed.get("message") or "no explanation given")
    text = masked(message, keep=(name, namespace or "", *keep))
    if len(text) > MAX_MESSAGE:
        text = text[: MAX_MESSAGE - 1] + "…"
    return Refusal(
        status=status,
        reason=str(parsed.get("reason") or "Unknown"),
        kind=str(manifest.get("kind") or "object"),
        namespace=namespace,
        name=name,
        message=text,
    )
