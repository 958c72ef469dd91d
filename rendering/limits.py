"""Bounds on a render: wall time, output size and the size of every value a template builds or writes.

Plan authors are trusted less than the controller, and a controller thread cannot be killed, so a render
must stop itself. The sandbox calls into this module at every point where a template can spend unbounded
time or memory: each loop iteration, each function call, each output chunk, the operators that can
multiply (``*``, ``**``, ``%``, ``+``, ``~``), the functions whose result can dwarf their input (``replace``,
``join``, ``indent``, padding, format widths) and every point where a value is written out as text
(``tojson``, ``string``, ``toYaml``, the YAML output, the registry). The checks are estimates made *before*
the work, so a single operation cannot allocate gigabytes before being refused; sizes are bytes of text
(:mod:`sizing`), not items, because a list of 300 references to one 1 MB string is 300 MB once written.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from opbroker.rendering import sizing
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
    ``max_objects`` bounds the objects one render writes (and the objects its ``sources`` map names): each is an
    API write, a record in the instance's ``status.resources`` and a read at every status render, and parameters a
    tenant writes can multiply them (a loop over a list parameter) within the byte limit; ``max_output_bytes``
    bounds the rendered text, every string/list built on the way (in bytes of text, see
    :mod:`sizing`), everything written into the objects and everything written into the registry;
    ``max_template_bytes`` bounds a template's source (inline, decoded or fetched); ``fetch_timeout`` is the one
    deadline of a ``url`` fetch (DNS, connect, TLS, redirects and body together), ``url_cache_ttl`` how long a
    fetched body is reused and ``url_cache_bytes`` how much fetched text is kept at most; ``max_int_bits`` stops
    arithmetic on giant integers.
    """

    timeout: float = 2.0
    max_objects: int = 256
    max_output_bytes: int = 1 << 20
    max_template_bytes: int = 1 << 20
    fetch_timeout: float = 10.0
    url_cache_ttl: float = 300.0
    url_cache_bytes: int = 32 << 20
    max_int_bits: int = 4096


class Budget:
    """The running account of one render: its deadline, limits and output written. Created per render."""

    __slots__ = ("deadline", "limits", "ticks", "written")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.timeout
        self.ticks = 0
        self.written = 0
        """Bytes of values written into the render's output so far (see :meth:`charge_output`)."""

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
        """Refuse a string or container that is already longer than the output may be. A cheap check on length
        for every argument and result; what a value would be *written as* is :meth:`check_written`'s."""
        if isinstance(value, str | bytes | list | tuple | dict) and len(value) > self.limits.max_output_bytes:
            self.check_size(len(value), what)

    def check_bits(self, bits: int, what: str) -> None:
        if bits > self.limits.max_int_bits:
            raise RenderLimitError(f"{what} would exceed {self.limits.max_int_bits} bits")

    # -- sizes of values as text ------------------------------------------------------------------------------

    def size(self, value: Any, *, indent: int = 0) -> int:
        """The value's size as text (:func:`sizing.estimate`), counted only as far as the limit."""
        return sizing.estimate(value, self.limits.max_output_bytes, indent=indent)

    def text_size(self, value: Any) -> int:
        """How long ``str(value)`` would be: a string's length, otherwise the estimate (no text is built)."""
        return len(value) if isinstance(value, str | bytes) else self.size(value)

    def check_written(self, value: Any, what: str, *, indent: int = 0) -> int:
        """Refuse a value whose text would be larger than the output may be; return its size otherwise."""
        size = self.size(value, indent=indent) if indent else self.text_size(value)
        self.check_size(size, what)
        return size

    def collect(self, iterable: Iterable[Any], what: str, *, separator: int = 0) -> list[Any]:
        """The items of ``iterable`` as a list, refused as soon as their text (plus ``separator`` per item)
        would pass the limit: what ``join`` and ``list`` materialize, measured before it is written."""
        self.check_time()
        limit = self.limits.max_output_bytes
        items: list[Any] = []
        total = 0
        for item in iterable:
            total += separator + (len(item) if isinstance(item, str) else sizing.estimate(item, limit))
            if total > limit:
                self.check_size(total, what)
            items.append(item)
            self.tick()
        return items

    def charge_output(self, size: int, what: str) -> None:
        """Count ``size`` bytes written into the render's output (values put into the YAML, registry writes):
        together they may not pass the limit, however many places they are written to."""
        self.written += size
        if self.written > self.limits.max_output_bytes:
            raise RenderLimitError(
                f"{what}: the values written by this render would be over {self.written} bytes, over the limit "
                f"of {self.limits.max_output_bytes}"
            )

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
                if (
                    isinstance(seq, str | bytes | list | tuple)
                    and isinstance(count, int)
                    and not isinstance(count, bool)
                ):
                    times = max(count, 0)
                    self.check_size(len(seq) * times, "a repeated sequence")
                    if times > 1 and isinstance(seq, list | tuple):
                        self.check_size(self.size(seq) * times, "a repeated sequence")
            if isinstance(left, int) and isinstance(right, int):
                self.check_bits(left.bit_length() + right.bit_length(), "a product")
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                self.check_bits(abs(left).bit_length() * right, "a power")
        elif operator == "%":
            if isinstance(left, str):
                self.check_percent(left, right)
        elif operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
            self.check_size(len(left) + len(right), "a concatenation")
            if isinstance(left, list | tuple) and isinstance(right, list | tuple):
                self.check_size(self.size(left) + self.size(right), "a concatenation")

    def check_format(self, spec: str) -> None:
        """Refuse printf/str.format strings with huge or argument-supplied widths (``%999999999d``, ``%*d``)."""
        if _HUGE_WIDTH.search(spec):
            raise RenderLimitError(f"format string {spec[:40]!r} asks for a width or precision that is too large")

    def check_percent(self, spec: str, args: Any) -> None:
        """``spec % args`` (and the ``format`` filter): widths, then the result's size. Each ``%`` of a tuple
        writes one argument once; with a mapping, any ``%(key)s`` may write the largest value again."""
        self.check_format(spec)
        if isinstance(args, Mapping):
            largest = max((self.text_size(v) for v in args.values()), default=0)
            self.check_size(len(spec) + spec.count("%") * largest, "a formatted string")
        else:
            self.check_size(len(spec) + self.text_size(args), "a formatted string")

    def check_str_format(self, spec: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """``spec.format(...)``/``format_map``: widths, then the result's size; each ``{...}`` may write the
        largest argument (positions and names can repeat)."""
        self.check_format(spec)
        values = [*args, *kwargs.values()]
        if len(args) == 1 and not kwargs and isinstance(args[0], Mapping):
            values = list(args[0].values())  # format_map
        largest = max((self.text_size(v) for v in values), default=0)
        self.check_size(len(spec) + spec.count("{") * largest, "a formatted string")

    def check_width(self, width: Any, what: str) -> None:
        if isinstance(width, int) and abs(width) > MAX_WIDTH:
            raise RenderLimitError(f"{what} {width} is over the limit of {MAX_WIDTH}")

    def check_str_method(self, subject: str | bytes, name: str, args: tuple[Any, ...]) -> None:
        """Estimate the result of the str (and bytes) methods that can grow a string, before they run."""
        if name in {"center", "ljust", "rjust", "zfill"} and args:
            self.check_width(args[0], f"str.{name} width")
        elif name == "expandtabs":
            tabsize = args[0] if args and isinstance(args[0], int) else 8
            tab = "\t" if isinstance(subject, str) else b"\t"
            self.check_size(len(subject) + subject.count(tab) * max(tabsize, 0), "an expanded string")  # type: ignore[arg-type]
        elif name == "replace" and len(args) >= 2:
            self.check_replace(subject, args[0], args[1])
        elif name == "join" and args:
            self.check_join(args[0], len(subject))
        elif name == "translate" and args and isinstance(args[0], Mapping):
            longest = max((self.text_size(v) for v in args[0].values() if v is not None), default=1)
            self.check_size(len(subject) * max(longest, 1), "a translated string")

    def check_replace(self, subject: str | bytes, old: Any, new: Any) -> None:
        if isinstance(old, str | bytes) and isinstance(new, str | bytes) and type(old) is type(subject):
            hits = subject.count(old) if old else len(subject) + 1  # type: ignore[arg-type]
            self.check_size(len(subject) + hits * max(len(new) - len(old), 0), "a replaced string")

    def check_replace_text(self, subject: Any, old: Any, new: Any) -> None:
        """The ``replace`` filter, which writes each argument as text first (``str()``): sized before that."""
        size = self.check_written(subject, "the text to replace in")
        old_size, new_size = (
            self.check_written(old, "a replace argument"),
            self.check_written(new, "a replace argument"),
        )
        if isinstance(subject, str) and isinstance(old, str) and isinstance(new, str):
            self.check_replace(subject, old, new)
        else:  # non-overlapping matches: at most size / len(old) of them (size + 1 for an empty ``old``)
            hits = size // old_size + 1 if old_size else size + 1
            self.check_size(size + hits * max(new_size - old_size, 0), "a replaced string")

    def check_join(self, items: Any, separator: int) -> None:
        """A join over a list or tuple: each item's text plus the separators (other iterables are collected
        with :meth:`collect` by the caller, which measures as it goes)."""
        if isinstance(items, list | tuple):
            self.check_size(len(items) * separator, "a joined string")
            total = 0
            for item in items:
                total += self.text_size(item) + separator
                if total > self.limits.max_output_bytes:
                    self.check_size(total, "a joined string")

    def check_indent(self, subject: Any, width: Any) -> None:
        """``indent``: the text (sized before ``str()`` builds it) plus ``width`` per line."""
        step = len(width) if isinstance(width, str) else width
        self.check_width(step, "indent width")
        size = self.check_written(subject, "the text to indent")
        if isinstance(subject, str) and isinstance(step, int):  # other values' text has no newlines (repr)
            self.check_size(size + (subject.count("\n") + 1) * max(step, 0), "an indented string")

    def check_wordwrap(self, subject: Any, width: Any, wrapstring: Any) -> None:
        """``wordwrap``: the text plus a ``wrapstring`` per line. Greedy wrapping puts more than ``width``
        characters on every two lines, so there are at most ``2 * size / width + 2`` lines, plus the text's own
        line breaks."""
        self.check_width(width, "wordwrap width")
        size = self.check_written(subject, "the text to wrap")
        wrap = self.check_written(wrapstring, "a wrapstring") if wrapstring is not None else 1
        step = max(width - 1, 1) if isinstance(width, int) else 1
        breaks = subject.count("\n") if isinstance(subject, str) else 0
        self.check_size(size + (2 * size // step + 2 + breaks) * wrap, "a wrapped string")
