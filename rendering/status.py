"""The ``status`` template's result, typed: what the controller copies into instance and binding status.

The template renders a YAML map with up to four sections, ``provision``, ``bind``, ``unbind`` and
``deprovision`` (Service Fabrik's shape). Each has a ``state`` (``in progress``, ``succeeded``, ``failed``),
optional ``error``/``description``, and per section:

* ``provision``: ``dashboardUrl``, ``instanceUsable``, ``updateRepeatable``;
* ``bind``: ``response``, the OSB bind response: a mapping, or a JSON string of one (as Service Fabrik's
  templates build it), holding ``credentials``;
* ``deprovision``: ``instanceUsable``.

Anything else is an error naming the section and field, so a typo (``dashboardURL``) fails loudly instead of
silently never reporting a URL. Empty strings count as absent, as they do in Service Fabrik's templates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from opbroker.api.osb import OperationState
from opbroker.rendering.errors import RenderError

#: The states a status section may report.
SECTION_STATES = {s.value: s for s in (OperationState.IN_PROGRESS, OperationState.SUCCEEDED, OperationState.FAILED)}

_COMMON = {"state", "error", "description"}
_FIELDS = {
    "provision": _COMMON | {"dashboardUrl", "instanceUsable", "updateRepeatable"},
    "bind": _COMMON | {"response"},
    "unbind": _COMMON,
    "deprovision": _COMMON | {"instanceUsable"},
}


@dataclass(frozen=True)
class SectionStatus:
    """One section of the status template: the state of one operation as the operator's objects show it."""

    state: OperationState
    error: str | None = None
    description: str | None = None
    response: dict[str, Any] | None = field(default=None, repr=False)
    """The bind response (``{"credentials": {...}, ...}``); kept out of ``repr`` because it holds secrets."""
    dashboard_url: str | None = None
    instance_usable: bool | None = None
    update_repeatable: bool | None = None


@dataclass(frozen=True)
class StatusResult:
    """The four sections; a section the template does not render is None."""

    provision: SectionStatus | None = None
    bind: SectionStatus | None = None
    unbind: SectionStatus | None = None
    deprovision: SectionStatus | None = None


def _text(section: str, name: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, dict | list):
        raise RenderError(f"status section {section!r}: {name} must be text, got a {type(value).__name__}")
    return value if isinstance(value, str) else json.dumps(value)


def _flag(section: str, name: str, value: Any) -> bool | None:
    if value is None or value == "":
        return None
    if not isinstance(value, bool):
        raise RenderError(f"status section {section!r}: {name} must be true or false, got {value!r}")
    return value


def _response(section: str, value: Any) -> dict[str, Any] | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise RenderError(f"status section {section!r}: response is a string but not JSON ({exc})") from None
    if not isinstance(value, dict) or not isinstance(value.get("credentials"), dict):
        raise RenderError(f"status section {section!r}: response must be a mapping holding a credentials mapping")
    return value


def _section(name: str, body: Any) -> SectionStatus:
    if not isinstance(body, dict):
        raise RenderError(f"status section {name!r} must be a mapping with a state, got {type(body).__name__}")
    unknown = sorted(set(body) - _FIELDS[name])
    if unknown:
        raise RenderError(f"status section {name!r}: unknown field(s) {unknown}; allowed: {sorted(_FIELDS[name])}")
    raw_state = body.get("state")
    state = SECTION_STATES.get(raw_state) if isinstance(raw_state, str) else None
    if state is None:
        raise RenderError(
            f"status section {name!r}: state {raw_state!r} is not one of {', '.join(map(repr, SECTION_STATES))}"
        )
    return SectionStatus(
        state=state,
        error=_text(name, "error", body.get("error")),
        description=_text(name, "description", body.get("description")),
        response=_response(name, body.get("response")),
        dashboard_url=_text(name, "dashboardUrl", body.get("dashboardUrl")),
        instance_usable=_flag(name, "instanceUsable", body.get("instanceUsable")),
        update_repeatable=_flag(name, "updateRepeatable", body.get("updateRepeatable")),
    )


def parse(document: Any) -> StatusResult:
    """Turn the status template's (pruned) document into a :class:`StatusResult`, or say what is wrong."""
    if document is None:
        return StatusResult()
    if not isinstance(document, dict):
        raise RenderError(f"the status template must render a mapping of sections, got {type(document).__name__}")
    unknown = sorted(set(document) - set(_FIELDS))
    if unknown:
        raise RenderError(f"status: unknown section(s) {unknown}; allowed: {list(_FIELDS)}")
    sections = {name: _section(name, body) for name, body in document.items()}
    return StatusResult(**sections)
