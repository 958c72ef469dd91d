"""The Jinja environment plan templates run in: an immutable sandbox with guards on time, size and output.

What a template can reach: its variables (read-only; ``ImmutableSandboxedEnvironment`` refuses ``append``,
``update`` and friends), Jinja's safe built-ins, the functions in :mod:`functions`, and the plan's snippets
through ``{% include %}``/``{% import %}``. What it cannot: attributes starting with ``_`` (so no
``__class__``/``__globals__``/``__subclasses__``), Python types, files (the only loader serves snippets), the
process environment, ``cycler``/``joiner``/``namespace``/``lipsum`` (removed), or the ``random`` filter (it
would break re-render stability). Every refusal raises :class:`jinja2.sandbox.SecurityError` at once instead
of Jinja's default of quietly rendering an empty string.

Beyond Jinja's sandbox this environment:

* routes every ``{{ }}`` through :func:`interpolation.finalize`, so values never become YAML syntax;
* refuses ``{% filter %}`` blocks and ``{% call %}`` on anything but a macro: both emit text that bypasses
  ``finalize``, so a value could be written out as raw YAML through them;
* rewrites every ``{% for %}`` to iterate through the render's budget (deadline), every ``~`` to a size-checked
  concatenation, and checks each call, operator and amplifying filter against :mod:`limits` before it runs.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from jinja2 import (
    ChainableUndefined,
    Environment,
    FunctionLoader,
    TemplateSyntaxError,
    nodes,
    pass_environment,
    pass_eval_context,
)
from jinja2.exceptions import SecurityError
from jinja2.filters import FILTERS as JINJA_FILTERS
from jinja2.filters import make_attrgetter
from jinja2.nodes import EvalContext
from jinja2.runtime import Context, Macro, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
from jinja2.visitor import NodeTransformer

from opbroker.rendering import functions, interpolation, state
from opbroker.rendering.errors import RenderLimitError
from opbroker.rendering.limits import Budget

#: How Jinja's filters name the context/eval-context/environment argument it passes them.
_PASS_PARAMETERS = frozenset({"context", "ctx", "eval_ctx", "env", "environment"})
#: Built-in filters plan templates do not get: ``random`` would make re-renders differ.
_DROPPED_FILTERS = frozenset({"random"})
#: What Jinja's ``wordcount`` counts as a word.
_WORDS = re.compile(r"\w+")


def _budget() -> Budget:
    return state.current().budget


def _prechecks() -> dict[str, Callable[[inspect.BoundArguments], None]]:
    """Size estimates for the built-in filters whose result can dwarf their input, checked before they run.

    Most filters write their input as text (``str()``) first: a list's text is sized by :mod:`sizing` before
    that, so ``[big] * 300 | string`` is refused without building 300 MB. Filters that materialize an iterable
    (``join``, ``list``, ``sum``) are replaced by :data:`_BOUNDED`, which measure as they collect.
    """

    def arg(bound: inspect.BoundArguments, name: str, default: Any = None) -> Any:
        return bound.arguments.get(name, default)

    def written(name: str, what: str) -> Callable[[inspect.BoundArguments], None]:
        def check(b: inspect.BoundArguments) -> None:
            _budget().check_written(arg(b, name), what)

        return check

    def format_filter(b: inspect.BoundArguments) -> None:
        budget, value = _budget(), arg(b, "value", "")
        budget.check_written(value, "a format string")
        kwargs = arg(b, "kwargs") or {}
        budget.check_percent(value if isinstance(value, str) else str(value), kwargs or tuple(arg(b, "args", ())))

    def tojson(b: inspect.BoundArguments) -> None:
        indent = arg(b, "indent")
        step = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
        _budget().check_width(step, "tojson indent")
        _budget().check_written(arg(b, "value"), "the JSON text", indent=step)

    def center(b: inspect.BoundArguments) -> None:
        _budget().check_width(arg(b, "width"), "center width")
        _budget().check_written(arg(b, "value"), "the text to center")

    checks: dict[str, Callable[[inspect.BoundArguments], None]] = {
        "center": center,
        "truncate": lambda b: _budget().check_width(arg(b, "length"), "truncate length"),
        "wordwrap": lambda b: _budget().check_wordwrap(arg(b, "s", ""), arg(b, "width", 79), arg(b, "wrapstring")),
        "slice": lambda b: _budget().check_width(arg(b, "slices"), "slice count"),
        "batch": lambda b: _budget().check_width(arg(b, "linecount"), "batch size"),
        "round": lambda b: _budget().check_width(arg(b, "precision"), "round precision"),
        "format": format_filter,
        "indent": lambda b: _budget().check_indent(arg(b, "s", ""), arg(b, "width", 4)),
        "replace": lambda b: _budget().check_replace_text(arg(b, "s", ""), arg(b, "old", ""), arg(b, "new", "")),
        "tojson": tojson,
        "pprint": lambda b: _budget().check_size(_budget().size(arg(b, "value"), indent=1), "the printed text"),
        "xmlattr": written("d", "the attributes' text"),
        "urlencode": written("value", "the text to encode"),
        "urlize": written("value", "the text to link"),
    }
    # Filters that write their first argument as text (``soft_str``/``str``) before anything else.
    for name, parameter in (
        ("string", "s"),
        ("safe", "value"),
        ("escape", "s"),
        ("e", "s"),
        ("forceescape", "value"),
        ("upper", "s"),
        ("lower", "s"),
        ("capitalize", "s"),
        ("title", "s"),
        ("trim", "value"),
        ("striptags", "value"),
        ("truncate", "s"),
        ("wordcount", "s"),
    ):
        first = checks.get(name)
        text = written(parameter, "the text")

        def both(b: inspect.BoundArguments, first: Any = first, text: Any = text) -> None:
            text(b)
            if first is not None:
                first(b)

        checks[name] = both
    return checks


@pass_eval_context
def _join(eval_ctx: EvalContext, value: Iterable[Any], d: Any = "", attribute: str | int | None = None) -> str:
    """Jinja's ``join``, with the items collected and measured before any text is joined."""
    budget = _budget()
    separator = budget.check_written(d, "a join separator")
    if attribute is not None:
        value = map(make_attrgetter(eval_ctx.environment, attribute), value)
    items = budget.collect(value, "a joined string", separator=separator)
    return JINJA_FILTERS["join"](eval_ctx, items, d)  # type: ignore[no-any-return]


def _list(value: Iterable[Any]) -> list[Any]:
    """Jinja's ``list``, refused as soon as the items' text passes the limit (a list of references to one
    large string is that string many times over once written)."""
    return _budget().collect(value, "a list")


@pass_environment
def _sum(environment: Environment, iterable: Iterable[Any], attribute: str | int | None = None, start: Any = 0) -> Any:
    """Jinja's ``sum``; summing lists (or tuples) concatenates them, so those are measured first."""
    if isinstance(start, list | tuple):
        if attribute is not None:
            iterable, attribute = map(make_attrgetter(environment, attribute), iterable), None
        budget = _budget()
        items = budget.collect(iterable, "a sum")
        budget.check_size(budget.size(start) + budget.size(items), "a sum")
        iterable = items
    return JINJA_FILTERS["sum"](environment, iterable, attribute=attribute, start=start)


def _wordcount(s: Any) -> int:
    """Jinja's ``wordcount`` without building the list of every word."""
    return sum(1 for _ in _WORDS.finditer(s if isinstance(s, str) else str(s)))


#: Built-in filters replaced by versions that measure what they materialize.
_BOUNDED: dict[str, Callable[..., Any]] = {"join": _join, "list": _list, "sum": _sum, "wordcount": _wordcount}


def _guarded_filter(name: str, func: Callable[..., Any], precheck: Callable[..., None] | None) -> Callable[..., Any]:
    """Wrap a filter with the deadline, its size estimate (if any) and a check of the result's size.

    ``functools.wraps`` keeps Jinja's ``pass_context``/``pass_eval_context`` marks on the wrapper.
    """
    signature = inspect.signature(func) if precheck is not None else None
    # Jinja passes the context/eval context/environment first when a filter asks for it; some filters (the
    # async_variant ones, e.g. ``slice``) ask for it without showing it in their signature.
    shown = next(iter(signature.parameters), "") if signature is not None else ""
    skip = 1 if getattr(func, "jinja_pass_arg", None) is not None and shown not in _PASS_PARAMETERS else 0

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.check_time()
        if precheck is not None and signature is not None:
            try:
                bound = signature.bind(*args[skip:], **kwargs)
            except TypeError:
                pass  # let the filter itself report the bad call
            else:
                precheck(bound)
        result = func(*args, **kwargs)
        budget.check_value(result, f"the result of the {name} filter")
        return result

    return guarded


def _guarded_range(*args: int) -> Iterable[int]:
    try:
        return safe_range(*args)
    except OverflowError:
        raise RenderLimitError("range() is limited to 100000 items in plan templates") from None


class _Guards(NodeTransformer):
    """Rewrites a parsed template so loops and concatenations run through the budget."""

    def visit_For(self, node: nodes.For) -> nodes.Node:  # NodeTransformer dispatches on the node name
        self.generic_visit(node)
        node.iter = nodes.Call(
            nodes.EnvironmentAttribute("guard_loop"), [node.iter], [], None, None, lineno=node.lineno
        )
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Call(
            nodes.EnvironmentAttribute("guard_concat"),
            [nodes.List(node.nodes, lineno=node.lineno)],
            [],
            None,
            None,
            lineno=node.lineno,
        )


class PlanEnvironment(ImmutableSandboxedEnvironment):
    """One environment per distinct set of snippets; shared by all renders and threads (it holds no render
    state: that lives in :mod:`state`)."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, snippets: Mapping[str, str] | None = None) -> None:
        self._snippets = dict(snippets or {})
        super().__init__(
            loader=FunctionLoader(self._load_snippet),
            undefined=ChainableUndefined,
            finalize=interpolation.finalize,
            autoescape=False,
            keep_trailing_newline=True,
            auto_reload=False,
            extensions=("jinja2.ext.loopcontrols",),
        )
        self.globals = {**functions.FUNCTIONS, "range": _guarded_range}
        checks = _prechecks()
        merged = {n: f for n, f in JINJA_FILTERS.items() if n not in _DROPPED_FILTERS} | _BOUNDED | functions.FILTERS
        self.filters = {name: _guarded_filter(name, func, checks.get(name)) for name, func in merged.items()}

    def _load_snippet(self, name: str) -> tuple[str, str, Callable[[], bool]] | None:
        source = self._snippets.get(name)
        if source is None:
            return None
        return source, f"snippet {name!r}", lambda: True

    # -- compile-time rewrites ----------------------------------------------------------------------------------

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        for block in tree.find_all(nodes.FilterBlock):
            raise TemplateSyntaxError(
                "{% filter %} blocks are not allowed in plan templates: apply filters to values instead",
                block.lineno,
                name,
                filename,
            )
        guarded = _Guards().visit(tree)
        assert isinstance(guarded, nodes.Template)
        guarded.set_environment(self)
        return guarded

    # -- run-time hooks (called by the compiled template) -------------------------------------------------------

    def guard_loop(self, iterable: Iterable[Any]) -> Iterator[Any]:
        return _budget().guard_loop(iterable)

    def guard_concat(self, parts: list[Any]) -> str:
        """``a ~ b``: every part is sized as text before any is written (``str()`` of a list builds it)."""
        budget = _budget()
        budget.check_size(sum(budget.text_size(part) for part in parts), "a concatenation")
        return "".join(
            part if isinstance(part, str) else "" if isinstance(part, Undefined) else str(part) for part in parts
        )

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.check_time()
        if "caller" in kwargs and not isinstance(obj, Macro):
            raise SecurityError("{% call %} works only with macros in plan templates")
        for value in (*args, *kwargs.values()):
            budget.check_value(value, "an argument")
        subject = getattr(obj, "__self__", None)
        if isinstance(subject, str | bytes) and inspect.isbuiltin(obj):
            if obj.__name__ == "join" and args and not isinstance(args[0], list | tuple):
                # str.join would collect a generator itself and only then size the result: collect it here
                args = (budget.collect(args[0], "a joined string", separator=len(subject)), *args[1:])
            budget.check_str_method(subject, obj.__name__, args)
        result = super().call(context, obj, *args, **kwargs)
        budget.check_value(result, "a call's result")
        return result

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        _budget().check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        spec: str = value.__self__

        def guarded(*args: Any, **kwargs: Any) -> str:
            budget = _budget()
            budget.check_str_format(spec, args, kwargs)
            result = wrapped(*args, **kwargs)
            budget.check_value(result, "a formatted string")
            return result

        return guarded

    def getattr(self, obj: Any, attribute: str) -> Any:
        # Jinja would hand back an undefined for ``undefined.__globals__`` (and ``cycler`` etc. are undefined
        # here); refuse every private name outright so probing fails loudly. Data keys starting with ``_``
        # stay reachable with ``obj["_key"]``.
        if attribute.startswith("_"):
            raise SecurityError(f"access to attribute {attribute!r} is not allowed")
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if isinstance(argument, str) and argument.startswith("_") and not isinstance(obj, Mapping):
            raise SecurityError(f"access to attribute {argument!r} is not allowed")
        return super().getitem(obj, argument)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is not allowed")
