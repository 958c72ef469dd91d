"""Resource quantities (``2``, ``"500m"``, ``"16Gi"``) as exact decimals, summed and printed back. Pure.

Parsing is the official client's (:func:`kubernetes.utils.parse_quantity`); this module only adds the
arithmetic over resource maps that capacity-aware scheduling and the SFCluster status need.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from kubernetes.utils import parse_quantity

#: A resource map: resource name → amount (``{"cpu": Decimal("0.5"), "memory": Decimal(2**30)}``).
Resources = dict[str, Decimal]

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity; the message names the resource."""


def parse(values: Mapping[str, object] | None) -> Resources:
    """A resource map from its wire form (as read: any value); raises :class:`QuantityError` naming the bad entry."""
    parsed: Resources = {}
    for name, value in (values or {}).items():
        try:
            parsed[name] = Decimal(parse_quantity(value))
        except (ValueError, TypeError) as exc:
            raise QuantityError(f"{name}: {value!r} is not a quantity") from exc
    return parsed


def total(maps: Iterable[Mapping[str, Decimal]]) -> Resources:
    """The sum of several resource maps."""
    result: Resources = {}
    for resources in maps:
        for name, amount in resources.items():
            result[name] = result.get(name, Decimal(0)) + amount
    return result


def scaled(resources: Mapping[str, Decimal], factor: int | Decimal) -> Resources:
    return {name: amount * factor for name, amount in resources.items()}


def largest(first: Mapping[str, Decimal], second: Mapping[str, Decimal]) -> Resources:
    """Per resource, the larger of two maps (two views of the same usage, never added up)."""
    return {name: max(first.get(name, Decimal(0)), second.get(name, Decimal(0))) for name in {*first, *second}}


def text(amount: Decimal) -> str:
    """A quantity as Kubernetes prints it: ``1500m``, ``2``, ``16Gi``."""
    if amount == amount.to_integral_value():
        whole = int(amount)
        for suffix, factor in _BINARY:
            if whole and whole % factor == 0:
                return f"{whole // factor}{suffix}"
        return str(whole)
    millis = amount * 1000
    if millis == millis.to_integral_value():
        return f"{int(millis)}m"
    return format(amount.normalize(), "f")


def wire(resources: Mapping[str, Decimal]) -> dict[str, int | str]:
    """A resource map in wire form (sorted), as the SFCluster status holds it."""
    return {name: text(resources[name]) for name in sorted(resources)}
