"""Renders are bounded in time and size, and a runaway template is stopped quickly with a clear error.

Aspects covered: huge ranges, nested loops (over ranges and over lists), exponential and infinite macro
recursion stop at the deadline; operations that can amplify their input (repetition, powers, format widths,
padding, replace, join, indent, concatenation, slicing) are refused *before* they allocate; the rendered text
and the resulting objects are bounded; the limits are configurable.
"""

from __future__ import annotations

import re
import threading
import tracemalloc

import pytest

from opbroker.api import SFPlan, TemplateAction
from opbroker.rendering import Limits, Renderer, RenderError, RenderInputs, RenderLimitError

HEAD = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  v: "
INPUTS = RenderInputs(instance={"metadata": {"name": "i"}, "spec": {"parameters": {"n": 3}}}, default_namespace="n")
FAST = Renderer(limits=Limits(timeout=0.3))
#: Only against a hang: a render the deadline failed to stop would otherwise block the whole suite.
WATCHDOG_SECONDS = 120


def plan(content: str) -> SFPlan:
    return SFPlan.model_validate(
        {
            "metadata": {"name": "limits"},
            "spec": {
                "name": "p",
                "id": "p",
                "description": "d",
                "serviceId": "s",
                "templates": [{"action": "provision", "type": "jinja2", "content": HEAD + content}],
            },
        }
    )


def render(content: str, renderer: Renderer = FAST) -> object:
    return renderer.render_objects(plan(content), TemplateAction.PROVISION, INPUTS)


@pytest.mark.parametrize(
    ("reason", "body", "message"),
    [
        ("the sandbox's range limit", "{% for i in range(10**9) %}x{% endfor %}", r"range\(\) is limited to 100000"),
        (
            "nested loops without output",
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "took longer than the limit of 0.3s",
        ),
        (
            "nested loops over a list",
            "{% set l = range(100000)|list %}{% for a in l %}{% for b in l %}{% endfor %}{% endfor %}",
            "took longer",
        ),
        (
            "exponential macro recursion",
            "{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(60) }}",
            "took longer",
        ),
        (
            "infinite macro recursion",
            "{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(0) }}",
            "nests too deeply|took longer",
        ),  # whichever limit trips first on a loaded machine
        (
            "exponential recursive loop",
            "{% for x in [1] recursive %}{{ loop([x, x]) }}{% endfor %}",
            "took longer|nests too deeply",
        ),
    ],
)
def test_runaway_templates_are_stopped_quickly(reason: str, body: str, message: str) -> None:
    # How soon after the 0.3 s deadline a render stops is measured in the bench (suite jinja-bombs), not here;
    # this test shows *that* the deadline or a structural limit stops it, with the error naming where. The
    # watchdog only keeps a broken deadline from hanging the suite: it is no speed claim.
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            render(body)
            outcome.append(None)
        except BaseException as exc:  # handed to the test thread as it is
            outcome.append(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(WATCHDOG_SECONDS)
    assert outcome, f"{reason}: still rendering after {WATCHDOG_SECONDS} s, the deadline did not stop it"
    caught = outcome[0]
    assert isinstance(caught, RenderLimitError), f"{reason}: {caught!r}"
    assert re.search(message, str(caught)), str(caught)
    assert "plan 'limits', action 'provision', template provision line 6" in str(caught)


@pytest.mark.parametrize(
    ("reason", "expression", "message"),
    [
        ("string repetition", "'x' * 10**9", "a repeated sequence"),
        ("list repetition", "[1] * 10**8", "a repeated sequence"),
        ("integer power", "2 ** 100000", "a power would exceed"),
        ("integer product", "(2 ** 2040) * (2 ** 2040) * (2 ** 2040)", "a product would exceed"),
        ("printf width", "'%999999999d' % 1", "width or precision"),
        ("printf width from an argument", "'%*d' % (10**9, 1)", "width or precision"),
        ("format filter width", "'%999999999s' | format('x')", "width or precision"),
        ("str.format width", "'{:999999999}'.format(1)", "width or precision"),
        ("str.format nested width", "'{:{}}'.format(1, 10**9)", "width or precision"),
        ("center filter", "'a' | center(10**9)", "center width"),
        ("str.center", "'a'.center(10**9)", "center width"),
        ("str.ljust", "'a'.ljust(10**9)", "ljust width"),
        ("str.zfill", "'1'.zfill(10**9)", "zfill width"),
        ("indent filter", "('x\\n' * 100000) | indent(1000)", "an indented string"),
        ("replace filter", "('x' * 100000) | replace('', 'y' * 100)", "a replaced string"),
        ("str.replace", "('x' * 1000).replace('x', 'y' * 10000)", "a replaced string"),
        ("str.expandtabs", "('\\t' * 100000).expandtabs(100)", "an expanded string"),
        ("join filter", "(['x' * 100000] | batch(100, 'x' * 100000) | first) | join", "a joined string"),
        ("str.join", "''.join(['x' * 100000] | batch(100, 'x' * 100000) | first)", "a joined string"),
        ("concatenation", "'a' ~ ('b' * 600000) ~ ('c' * 600000)", "a concatenation"),
        ("list concatenation", "(['x'] * 150000) + (['y'] * 150000)", "a concatenation"),
        ("slice filter", "range(10) | slice(10**9) | list", "slice count"),
        ("batch filter", "range(10) | batch(10**9) | list", "batch size"),
        ("truncate filter", "'x' | truncate(10**9)", "truncate length"),
        ("wordwrap filter", "'x' | wordwrap(10**9)", "wordwrap width"),
        ("a too-large interpolated value", "'x' * 1048577", "a repeated sequence"),
    ],
)
def test_amplifying_operations_are_refused_before_they_run(reason: str, expression: str, message: str) -> None:
    """Refused before allocating: the render's peak of traced memory stays far below what the operation would
    have built (each builds 100 MB or more). Memory, not time, so a loaded machine cannot fail it."""
    tracemalloc.start()
    try:
        with pytest.raises(RenderLimitError, match=message):
            render("{{ " + expression + " }}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024, f"{reason}: peaked at {peak} bytes"


def test_the_rendered_text_is_bounded() -> None:
    with pytest.raises(RenderLimitError, match="rendered text is larger than the limit of 1048576 bytes"):
        render("x\n{% for i in range(100000) %}  k{{ i }}: {{ 'y' * 20 }}\n{% endfor %}", Renderer())


def test_the_rendered_objects_are_bounded_too() -> None:
    """A small text can still expand: a YAML alias tree in the template itself is refused, not expanded."""
    body = (
        "x\n  a: &a [y, y, y, y, y, y, y, y, y, y]\n  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n  f: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
    )
    with pytest.raises(RenderLimitError, match="rendered output is larger than the limit"):
        render(body, Renderer())


@pytest.mark.parametrize(
    ("limits", "fits"),
    [
        (Limits(max_output_bytes=100), False),
        (Limits(max_output_bytes=10_000), True),
    ],
)
def test_the_output_limit_is_configurable(limits: Limits, fits: bool) -> None:
    renderer = Renderer(limits=limits)
    body = "{{ 'z' * 500 }}"
    if fits:
        render(body, renderer)
    else:
        with pytest.raises(RenderLimitError, match="over the limit of 100"):
            render(body, renderer)


def test_the_time_limit_is_configurable() -> None:
    body = "{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}ok"
    render(body, Renderer(limits=Limits(timeout=30)))
    with pytest.raises(RenderLimitError, match=r"0\.001s"):
        render(body, Renderer(limits=Limits(timeout=0.001)))


def test_ordinary_arithmetic_and_strings_are_not_refused() -> None:
    rendered = FAST.render_objects(
        plan(
            "{{ (2 ** 64) ~ '-' ~ ('ab' * 3) ~ '-' ~ '%05d' % 42 ~ '-' ~ 'x'.center(5) ~ '-' ~ 1700000000 | string }}"
        ),
        TemplateAction.PROVISION,
        INPUTS,
    )
    assert rendered.objects[0].manifest["data"]["v"] == "18446744073709551616-ababab-00042-  x  -1700000000"


def test_a_limit_error_is_a_render_error() -> None:
    assert issubclass(RenderLimitError, RenderError)
