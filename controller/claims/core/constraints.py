"""Which environments a registered service is offered in. Pure.

The seed's rule, stated exactly (``constraints.environments`` of a RegisteredService):

* no list, or an empty one: offered in every environment;
* ``!env`` excludes ``env``, and an exclusion always wins (``[prod, "!prod"]`` is not offered in prod);
* as soon as the list holds one exclusion, it means "every environment except the excluded ones": the
  inclusions beside it are redundant (``["!prod", dev]`` is offered in dev *and* in stage);
* a list of inclusions only means "exactly these environments".

Blank entries (``""``, ``"!"``) are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Environments:
    """A parsed ``constraints.environments`` list."""

    included: frozenset[str]
    excluded: frozenset[str]

    @property
    def unconstrained(self) -> bool:
        return not self.included and not self.excluded


UNCONSTRAINED = Environments(included=frozenset(), excluded=frozenset())


def parse(environments: Iterable[str] | None) -> Environments:
    included: set[str] = set()
    excluded: set[str] = set()
    for raw in environments or ():
        entry = raw.strip()
        if entry.startswith("!"):
            name = entry[1:].strip()
            if name:
                excluded.add(name)
        elif entry:
            included.add(entry)
    return Environments(included=frozenset(included), excluded=frozenset(excluded))


def offered(constraint: Environments, environment: str) -> bool:
    """Whether a service with ``constraint`` may be claimed from ``environment``."""
    if environment in constraint.excluded:
        return False
    if constraint.excluded:
        return True
    if constraint.included:
        return environment in constraint.included
    return True


def explain(constraint: Environments, environment: str) -> str:
    """Why ``environment`` is not offered (for a candidate verdict); only meaningful when not offered."""
    if environment in constraint.excluded:
        return f"environment {environment!r} is excluded (!{environment})"
    return f"environment {environment!r} is not among {sorted(constraint.included)}"


def named(constraint: Environments) -> frozenset[str]:
    """The environments a constraint names positively (each gets a catalog)."""
    return constraint.included
