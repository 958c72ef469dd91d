"""The state of the render in progress, reachable from template functions without passing it through Jinja.

The environment (and its compiled templates) is shared by every render and every thread, so anything that
belongs to one render lives here: the interpolation slots, the budget, the registry being read and written,
the request parameters. A :class:`contextvars.ContextVar` holds it, which makes concurrent renders on
different threads independent and keeps it out of the template's namespace (a template cannot name it).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opbroker.rendering import registry
from opbroker.rendering.limits import Budget

#: How every interpolation marker starts (see ``interpolation``); letters only, so a marker is a plain scalar.
MARKER_PREFIX = "opbrk"
#: Any render's marker: prefix, 16 hex digits of nonce, slot number. Compiled once; the nonce is compared
#: per match, so a marker of another render (or a forged one) stays literal text.
MARKER = re.compile(f"{MARKER_PREFIX}([0-9a-f]{{16}})v([0-9]+)e")


_NONCE_KEY = secrets.token_bytes(32)
_NONCE_COUNTER = itertools.count()


def fresh_nonce() -> str:
    """16 hex digits no template can predict: the process's random key over a counter (BLAKE2b, keyed). Not a
    ``secrets`` draw per render: that is a ``getrandom`` system call, which gives the GIL up and waits for it
    again — three per reconcile of a settled instance, seen in the restart bench's profile."""
    counter = next(_NONCE_COUNTER).to_bytes(8, "big")
    return hashlib.blake2b(counter, key=_NONCE_KEY, digest_size=8).hexdigest()


@dataclass
class RenderState:
    """Everything one render reads and writes besides the template variables."""

    budget: Budget
    registry: registry.Registry
    parameters: Mapping[str, Any]
    nonce: str = field(default_factory=fresh_nonce)
    """Random per render, so a template (or a value) cannot forge an interpolation marker."""
    slots: list[Any] = field(default_factory=list)
    """The value of every ``{{ ... }}`` in output order; the text holds only markers pointing here."""
    prepaid: set[int] = field(default_factory=set)
    """Slots whose value was charged to the output when ``{{ }}`` produced it and whose marker has not been
    resolved yet: resolving it the first time costs nothing more, any further time it does."""
    verbatim: bool = False
    """The rendered text holds the values themselves (Go's output has no markers), so an error message must
    never quote it: a credential could be on the line."""


_CURRENT: ContextVar[RenderState] = ContextVar("opbroker_rendering_state")


def current() -> RenderState:
    """The state of the render running on this thread/task."""
    try:
        return _CURRENT.get()
    except LookupError:
        raise RuntimeError("template functions can only run inside a render") from None


@contextmanager
def active(state: RenderState) -> Iterator[RenderState]:
    """Make ``state`` the current render's state for the duration of the block."""
    token = _CURRENT.set(state)
    try:
        yield state
    finally:
        _CURRENT.reset(token)
