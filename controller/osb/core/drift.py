"""Drift (issue 43): what of a rendered object someone changed since opbroker applied it, and what to do about it.

Pure: the rendered manifest (as opbroker would apply it now) against the live object (as read), and the history of
the corrections made so far. Three questions, one function each:

* :func:`differences` — the fields the manifest sets whose live value is not the one it sets. Only what the
  manifest names is compared: a field opbroker never set (an operator's defaults, another controller's additions,
  the whole ``status``) is somebody else's and is left alone. ``ownerReferences`` are ownership's business
  (:mod:`opbroker.controller.osb.ownership`), not drift, and neither is the shard label (``opbroker.io/shard``:
  moved with its owner between shards, :mod:`opbroker.controller.shards.core`). A Secret's ``stringData`` is
  compared as the ``data`` it becomes.
* :func:`verdict` — correct it now, wait (the per-object backoff), or stop: an object set back ``max_corrections``
  times within ``window_seconds`` has another writer fighting over it, and correcting it again would only make a
  hot loop of two controllers. Then ``Synced=False`` names that writer (:func:`other_managers`, read from the live
  object's ``managedFields``) and opbroker looks again once the window has passed.
* :func:`drift_message` / :func:`fight_message` — what the Event and the condition say: kinds, names and field
  paths, never a value (a Secret's fields are named, its data never shown).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from opbroker.api.meta import ResourceRef
from opbroker.api.shards import SHARD_LABEL
from opbroker.controller.runtime.policies import DEFAULTS
from opbroker.kubeclient.wire import JsonBody, JsonObject, mapping_of, objects_of
from opbroker.osbclient import Backoff

#: Fields of ``metadata`` that drift compares (the rest — name, uid, ownerReferences, managedFields, ... — is the
#: API server's or ownership's).
COMPARED_METADATA = ("labels", "annotations")
#: The most field paths one Event or condition names (its message is cut at 1 024 characters).
FIELDS_NAMED = 8


def _secret_data(manifest: JsonObject) -> JsonObject:
    """A Secret's manifest with ``stringData`` folded into ``data`` (base64), as the API server stores it."""
    strings = manifest.get("stringData")
    if not isinstance(strings, Mapping):
        return manifest
    data = dict(mapping_of(manifest.get("data")))
    for name, value in strings.items():
        data[name] = base64.b64encode(str(value).encode()).decode()
    folded: JsonBody = {k: v for k, v in manifest.items() if k != "stringData"}
    folded["data"] = data
    return folded


def _compare(desired: object, live: object, path: str, out: list[str]) -> None:
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            out.append(path or ".")
            return
        for name, value in desired.items():
            _compare(value, live.get(name), f"{path}.{name}" if path else str(name), out)
        return
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            out.append(path)
            return
        for i, (want, have) in enumerate(zip(desired, live, strict=True)):
            _compare(want, have, f"{path}[{i}]", out)
        return
    if desired is None:
        return  # a null in a manifest sets nothing (server-side apply drops it)
    if isinstance(desired, bool) != isinstance(live, bool) or (desired != live and not _same_number(desired, live)):
        out.append(path)  # True == 1 in Python, not on the wire


def _same_number(desired: object, live: object) -> bool:
    """1 and 1.0 are one value on the wire (JSON numbers); a bool is not a number here."""
    numbers = (int, float)
    return (
        isinstance(desired, numbers)
        and isinstance(live, numbers)
        and not isinstance(desired, bool)
        and not isinstance(live, bool)
        and float(desired) == float(live)
    )


def differences(desired: JsonObject, live: JsonObject | None) -> tuple[str, ...]:
    """The field paths ``desired`` (a manifest as opbroker applies it) sets to a value ``live`` does not hold;
    ``("(deleted)",)`` when the object is gone. Lists are compared item by item when their lengths agree (the API
    server defaults fields inside items, which a subset comparison leaves alone), as a whole otherwise."""
    if live is None:
        return (DELETED,)
    if desired.get("kind") == "Secret":
        desired = _secret_data(desired)
    out: list[str] = []
    meta = mapping_of(desired.get("metadata"))
    live_meta = mapping_of(live.get("metadata"))
    for name in COMPARED_METADATA:
        if name in meta:
            desired_part = meta[name]
            if name == "labels" and isinstance(desired_part, Mapping):  # the shard's: bookkeeping, not declared
                desired_part = {key: value for key, value in desired_part.items() if key != SHARD_LABEL}
            _compare(desired_part, live_meta.get(name) or {}, f"metadata.{name}", out)
    for name, value in desired.items():
        if name in ("apiVersion", "kind", "metadata", "status"):
            continue
        _compare(value, live.get(name), name, out)
    return tuple(out)


DELETED = "(deleted)"


def shape(live: JsonObject | None) -> str | None:
    """What of a live object drift could have moved, in a few bytes: its uid and ``metadata.generation`` (the API
    server bumps it on every change of the spec, never on a status write) with its labels and annotations (which
    no generation counts). None — compare it — when the object is gone, or carries no generation (a ConfigMap, a
    Secret: then nothing but a comparison tells). A settled instance whose rendered objects all keep the shape they
    had when it was last found as declared needs no comparison: an operator reporting through ``status`` costs the
    status template's evaluation, not a render of ``provision``."""
    if live is None:
        return None
    meta = mapping_of(live.get("metadata"))
    generation = meta.get("generation")
    if not isinstance(generation, int):
        return None
    marks = json.dumps(
        [meta.get("uid"), generation, meta.get("labels") or {}, meta.get("annotations") or {}],
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(marks.encode()).hexdigest()[:24]


def unmoved(shapes: Mapping[Any, str | None], remembered: Mapping[Any, str]) -> bool:
    """Whether every rendered object (``shapes``, by key, as read now) has the shape remembered from the last check
    that found it as declared (none remembered, or one without a shape: it must be compared)."""
    return bool(shapes) and all(now is not None and remembered.get(key) == now for key, now in shapes.items())


class Verdict(StrEnum):
    """What to do with an object found drifted."""

    CORRECT = "correct"
    """Set it back now."""
    WAIT = "wait"
    """Corrected a moment ago: set it back once its backoff has passed (:attr:`Decision.after`)."""
    FIGHT = "fight"
    """Set back ``max_corrections`` times in the window: another writer wants it otherwise. Stop, say so."""


@dataclass(frozen=True)
class Bounds:
    """How often one object may be set back."""

    max_corrections: int = 3
    """Corrections of one object within ``window_seconds`` before opbroker calls it a fight and stops."""
    window_seconds: float = 300.0
    backoff: Backoff = DEFAULTS.drift_backoff
    """The wait after the first correction, doubling with each further one in the window (the policy table's
    ``drift_backoff``)."""


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    after: float = 0.0
    """Seconds until the object may be set back (WAIT), or until the fight's window has passed (FIGHT)."""


def verdict(history: Sequence[datetime.datetime], now: datetime.datetime, bounds: Bounds) -> Decision:
    """Whether an object found drifted is set back now, given when it was set back before (``history``: the
    corrections that changed it, oldest first)."""
    recent = [t for t in history if (now - t).total_seconds() < bounds.window_seconds]
    if len(recent) >= bounds.max_corrections:
        return Decision(Verdict.FIGHT, bounds.window_seconds - (now - recent[0]).total_seconds())
    if recent:
        backoff = bounds.backoff.delay(len(recent))
        waited = (now - recent[-1]).total_seconds()
        if waited < backoff:
            return Decision(Verdict.WAIT, backoff - waited)
    return Decision(Verdict.CORRECT)


def fighting(history: Sequence[datetime.datetime], now: datetime.datetime, bounds: Bounds) -> bool:
    """Whether a drift found now would be a fight (:func:`verdict` says FIGHT): then the reconciler reads the object
    past its store (which keeps no ``managedFields``) to name the other writer."""
    return verdict(history, now, bounds).verdict is Verdict.FIGHT


def recent(
    history: Sequence[datetime.datetime], now: datetime.datetime, bounds: Bounds
) -> tuple[datetime.datetime, ...]:
    """The corrections still inside the window (what a memory keeps; older ones can decide nothing)."""
    return tuple(t for t in history if (now - t).total_seconds() < bounds.window_seconds)


def other_managers(live: JsonObject | None, own_prefix: str) -> tuple[str, ...]:
    """Who else writes the object: the field managers of its ``managedFields`` not named ``own_prefix``…, the most
    recent first (the likeliest party to a fight). Empty when the object records none."""
    if live is None:
        return ()
    found: list[tuple[str, str]] = []
    for entry in objects_of(mapping_of(live.get("metadata")).get("managedFields")):
        manager = entry.get("manager")
        if not isinstance(manager, str) or not manager or manager.startswith(own_prefix):
            continue
        if entry.get("subresource"):  # status writers (the operator reporting) never set what we render
            continue
        found.append((str(entry.get("time") or ""), manager))
    ordered = [manager for _, manager in sorted(found, reverse=True)]
    return tuple(dict.fromkeys(ordered))


def _named(ref: ResourceRef) -> str:
    return f"{ref.kind} {ref.namespace}/{ref.name}" if ref.namespace else f"{ref.kind} {ref.name}"


def _fields(paths: Sequence[str]) -> str:
    more = len(paths) - FIELDS_NAMED
    return ", ".join(paths[:FIELDS_NAMED]) + (f" and {more} more" if more > 0 else "")


def drift_message(ref: ResourceRef, paths: Sequence[str], *, corrected: bool) -> str:
    """The Event of a drift found: the object, and the fields (never their values)."""
    if tuple(paths) == (DELETED,):
        return f"{_named(ref)} was deleted: " + ("created again" if corrected else "left deleted (drift: report)")
    what = "set back" if corrected else "left as they are (drift: report)"
    return f"{_named(ref)} changed outside opbroker, fields {_fields(paths)}: {what}"


def fight_message(ref: ResourceRef, paths: Sequence[str], managers: Sequence[str], bounds: Bounds) -> str:
    """The ``Synced=False`` message of a fight: which object, which fields, who else writes them."""
    who = ", ".join(repr(m) for m in managers[:3]) if managers else "another writer"
    return (
        f"{_named(ref)}: fields {_fields(paths)} were set back {bounds.max_corrections} times within "
        f"{bounds.window_seconds:.0f}s and changed again, last by {who}: opbroker stopped correcting it; it tries "
        "again once the window has passed (stop the other writer, or give the template drift: ignore)"
    )
