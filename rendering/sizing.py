"""How large a value would be once written out, estimated without writing it.

Why: a template can hold a value that is cheap in memory and huge as text. ``[big] * 300`` is 300 references
to one 1 MB string, a few kilobytes to keep, but 300 MB once ``tojson``, ``join``, ``~``, ``string``,
``toYaml`` or the output writes it. A limit on items, or on a result after it is built, comes too late: the
bytes are allocated by then. So every operation that writes a value as text (or repeats one) first asks
:func:`estimate` how large the text would be, and refuses past the limit before any of it exists.

The estimate is compact JSON's size, counted in characters: a string its length plus quotes, a number its
digits, ``null``/``true``/``false`` their words, a container its brackets plus, per item, a separator and
(for the indenting writers: ``toYaml``, ``tojson(indent=n)``, ``pprint``) ``indent`` characters per level of
depth. A value referenced twice counts twice, because it is written twice. Escaping (JSON's ``\\uXXXX``, HTML
entities, percent-encoding) can make the real text a few times longer; the results are checked again after
they are built, so that factor only bounds the peak, it never lets an oversize result through.

Cost: the walk stops as soon as the total passes ``cap`` (every item adds at least one character, so it takes
at most about ``cap`` steps), and remembers the size of each container it has walked, so a list referenced 300
times is walked once. Generators and other one-shot iterables are not consumed (they are sized when something
materializes them); unknown objects count as a short ``repr``.
"""

from __future__ import annotations

from collections.abc import ItemsView, KeysView, Mapping, ValuesView
from typing import Any

from jinja2 import Undefined

#: What an object of an unknown type is assumed to write (its ``repr``: ``<Macro 'm'>``, a loop context).
OPAQUE = 32
_WORDS = {None: 4, True: 4, False: 5}


def estimate(value: Any, cap: int, *, indent: int = 0) -> int:
    """The size in characters of ``value`` written as (compact, or ``indent``-ed) JSON; any number above
    ``cap`` once it is known to be larger than ``cap`` (the walk stops there)."""
    return _Walk(cap, max(indent, 0)).size(value, 0, cap)


class _Walk:
    __slots__ = ("cap", "indent", "known")

    def __init__(self, cap: int, indent: int) -> None:
        self.cap = cap
        self.indent = indent
        self.known: dict[tuple[int, int], int] = {}
        """Sizes of the containers walked, by (id, depth). Each is reachable from the value being sized for the
        whole walk, so its id cannot be reused meanwhile (the pairs of an items view are never remembered)."""

    def size(self, value: Any, depth: int, room: int) -> int:
        """The size of ``value`` at ``depth``, or a number above ``room`` once it is known to exceed it."""
        if isinstance(value, str | bytes | bytearray):
            return len(value) + 2
        if value is None or isinstance(value, bool):
            return _WORDS[value]
        if isinstance(value, int):
            return value.bit_length() * 3 // 10 + 2
        if isinstance(value, float):
            return 24
        if isinstance(value, Undefined):
            return 4
        if isinstance(value, range):
            digits = len(str(max(abs(value.start), abs(value.stop)))) + 2
            return 2 + len(value) * digits
        if isinstance(value, Mapping | list | tuple | set | frozenset | KeysView | ValuesView | ItemsView):
            key = (id(value), depth)
            known = self.known.get(key)
            if known is None:
                known = self._container(value, depth, room)
                if known > room:
                    return known  # unfinished: never remembered
                self.known[key] = known
            return known
        return OPAQUE

    def _container(self, value: Any, depth: int, room: int) -> int:
        per_item = 1 + (self.indent * (depth + 1) + 1 if self.indent else 0)
        total = 2
        if isinstance(value, Mapping):
            for key, item in value.items():
                total += per_item + self.size(key, depth + 1, room - total) + 1
                if total > room:
                    return total
                total += self.size(item, depth + 1, room - total)
                if total > room:
                    return total
            return total
        if isinstance(value, ItemsView):  # its (key, item) pairs are made on the fly: size them, never remember
            for key, item in value:
                total += per_item + 3 + self.size(key, depth + 2, room - total)
                total += self.size(item, depth + 2, room - total) if total <= room else 0
                if total > room:
                    return total
            return total
        for item in value:
            total += per_item + self.size(item, depth + 1, room - total)
            if total > room:
                return total
        return total
