"""Bounds on a render: wall time, output size and the size of every value a template builds.

Plan authors are trusted less than the controller, and a controller thread cannot be killed, so a render
must stop itself. The sandbox calls into this module at every point where a template can spend unbounded
time or memory: each loop iteration, each function call, each output chunk, the operators that can
multiply (``*``, ``**``, ``%``, ``+``, ``~``) and the string functions whose result can dwarf their input
(``replace``, ``join``, ``indent``, padding, format widths). The checks are estimates made *before* the
work, so a single operation cannot allocate gigabytes before being refused.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Sized
from dataclasses import dataclass
from typing import Any

from opbroker.rendering.errors import RenderLimitError

#: Largest width/count a width-taking filter or string method accepts (the sandbox's own range limit).
MAX_WIDTH = 100_000
#: How many loop iterations pass between two clock reads (reading the clock costs more than an iteration).
_TICK_MASK = 0xFF
#: A width or precision in a %-format or str.format spec: 6+ digits is never a real template's intent.
_HUGE_WIDTH = re.compile(r"\d{6,}|%[-#0 +]*\*|\{[^{}]*:[^{}]*\{")


@dataclass(frozen=True)
class Limits:
    """What one render may consume. The defaults suit a controller rendering many plans per second.

    ``timeout`` is wall time for one render (template, YAML parsing and post-processing);
    ``max_output_bytes`` bounds the rendered text and every string/list built on the way;
    ``max_template_bytes`` bounds a template's source (inline, decoded or fetched); ``fetch_timeout`` is the one
    deadline of a ``url`` fetch (DNS, connect, TLS, redirects and body together), ``url_cache_ttl`` how long a
    fetched body is reused and ``url_cache_bytes`` how much fetched text is kept at most; ``max_int_bits`` stops
    arithmetic on giant integers.
    """

    timeout: float = 2.0
    max_output_bytes: int = 1 << 20
    max_template_bytes: int = 1 << 20
    fetch_timeout: float = 10.0
    url_cache_ttl: float = 300.0
    url_cache_bytes: int = 32 << 20
    max_int_bits: int = 4096


class Budget:
    """The running account of one render: its deadline and limits. Created per render, never shared."""

    __slots__ = ("deadline", "limits", "ticks")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.timeout
        self.ticks = 0

    def check_time(self) -> None:
        """Raise once the render has used up its time."""
        if time.monotonic() > self.deadline:
            raise RenderLimitError(f"rendering took longer than the limit of {self.limits.timeout:g}s")

    def tick(self) -> None:
        """A cheap check for hot paths: reads the clock every 256 calls."""
        self.ticks += 1
        if not self.ticks & _TICK_MASK:
            self.check_time()

    def check_size(self, size: int, what: str) -> None:
        if size > self.limits.max_output_bytes:
            raise RenderLimitError(
                f"{what} would be {size} bytes/items, over the limit of {self.limits.max_output_bytes}"
            )

    def check_value(self, value: Any, what: str) -> None:
        """Refuse a string or container that is already larger than the output may be."""
        if isinstance(value, str | bytes | list | tuple | dict) and len(value) > self.limits.max_output_bytes:
            self.check_size(len(value), what)

    def check_bits(self, bits: int, what: str) -> None:
        if bits > self.limits.max_int_bits:
            raise RenderLimitError(f"{what} would exceed {self.limits.max_int_bits} bits")

    def guard_loop(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Iterate ``iterable`` with the deadline checked as it goes (every ``{% for %}`` is wrapped in this)."""
        self.check_time()
        deadline = self.deadline
        for index, item in enumerate(iterable):
            if not index & _TICK_MASK and time.monotonic() > deadline:
                self.check_time()
            yield item

    # -- estimates for operations that can amplify their input -------------------------------------------------

    def check_binop(self, operator: str, left: Any, right: Any) -> None:
        """Refuse ``*``, ``**``, ``%`` and ``+`` whose result would be too large, before computing it."""
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, str | bytes | list | tuple) and isinstance(count, int):
                    self.check_size(len(seq) * max(count, 0), "a repeated sequence")
            if isinstance(left, int) and isinstance(right, int):
                self.check_bits(left.bit_length() + right.bit_length(), "a product")
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                self.check_bits(abs(left).bit_length() * right, "a power")
        elif operator == "%":
            if isinstance(left, str):
                self.check_format(left)
        elif operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
            self.check_size(len(left) + len(right), "a concatenation")

    def check_format(self, spec: str) -> None:
        """Refuse printf/str.format strings with huge or argument-supplied widths (``%999999999d``, ``%*d``)."""
        if _HUGE_WIDTH.search(spec):
            raise RenderLimitError(f"format string {spec[:40]!r} asks for a width or precision that is too large")

    def check_width(self, width: Any, what: str) -> None:
        if isinstance(width, int) and abs(width) > MAX_WIDTH:
            raise RenderLimitError(f"{what} {width} is over the limit of {MAX_WIDTH}")

    def check_str_method(self, subject: str, name: str, args: tuple[Any, ...]) -> None:
        """Estimate the result of the str methods that can grow a string, before they run."""
        if name in {"center", "ljust", "rjust", "zfill"} and args:
            self.check_width(args[0], f"str.{name} width")
        elif name == "expandtabs":
            tabsize = args[0] if args and isinstance(args[0], int) else 8
            self.check_size(len(subject) + subject.count("\t") * max(tabsize, 0), "an expanded string")
        elif name == "replace" and len(args) >= 2:
            self.check_replace(subject, args[0], args[1])
        elif name == "join" and args:
            self.check_join(args[0], len(subject))

    def check_replace(self, subject: str, old: Any, new: Any) -> None:
        if isinstance(old, str) and isinstance(new, str):
            hits = subject.count(old) if old else len(subject) + 1
            self.check_size(len(subject) + hits * max(len(new) - len(old), 0), "a replaced string")

    def check_join(self, items: Any, separator: int) -> None:
        if isinstance(items, Sized) and not isinstance(items, str | bytes | dict):
            self.check_size(len(items) * separator, "a joined string")
            if isinstance(items, list | tuple):
                total = sum(len(item) if isinstance(item, str) else 8 for item in items)
                self.check_size(total + len(items) * separator, "a joined string")

    def check_indent(self, subject: Any, width: Any) -> None:
        self.check_width(width, "indent width")
        if isinstance(subject, str) and isinstance(width, int):
            self.check_size(len(subject) + subject.count("\n") * max(width, 0), "an indented string")
