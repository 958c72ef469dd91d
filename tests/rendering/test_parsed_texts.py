"""Rendered texts parsed once per shape (issue 31): ``output.ParsedTexts``.

Aspects covered: a second text of the same shape (the same template characters, another render's nonce and
values) is not parsed again and still gets its own values, in containers of its own; values keep their type
alone and become text when mixed, as on a first parse; a text whose mapping keys hold markers, a Go template's
text (it holds the values themselves) and an over-long text are not kept; a text holding a NUL where another
render's nonce stood is refused as YAML, not answered from the other's parse; an anchor and its alias stay one
object (a scalar with a marker among them: resolved once) and an alias bomb is still refused on a second
render of its template; the cache's count and size bounds.
"""

from __future__ import annotations

from typing import Any

import pytest

from opbroker.api import TemplateAction
from opbroker.rendering import Limits, Renderer, RenderError, RenderInputs, RenderLimitError, output, registry, state
from opbroker.rendering.interpolation import marker
from opbroker.rendering.limits import Budget
from tests.rendering.test_output import make_plan


def render_state(*values: Any, verbatim: bool = False) -> state.RenderState:
    """A render's state whose slots hold ``values`` (as ``{{ }}`` would have put them)."""
    current = state.RenderState(
        budget=Budget(Limits()), registry=registry.Registry({}, writable=False), parameters={}, verbatim=verbatim
    )
    current.slots.extend(values)
    current.prepaid.update(range(len(values)))
    return current


def text_of(current: state.RenderState) -> str:
    """One rendered text's shape, the markers of ``current``'s render in it."""
    m0, m1 = marker(current.nonce, 0), marker(current.nonce, 1)
    return f"name: {m0}\nspec: {m1}\nlabel: pre-{m0}\nquoted: '{m1}'\nplain: [1, yes, ~]\n"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts really parsed (not answered from the cache)."""
    seen: list[str] = []
    real = output._parse

    def counting(text: str, current: state.RenderState) -> Any:
        seen.append(text)
        return real(text, current)

    monkeypatch.setattr(output, "_parse", counting)
    return seen


def test_a_second_text_of_the_same_shape_is_not_parsed_again_and_gets_its_own_values(parses: list[str]) -> None:
    parsed = output.ParsedTexts()
    first = render_state("db-1", {"size": 1})
    second = render_state("db-2", {"size": 2, "tier": "gold"})

    one = output.parse_documents(text_of(first), first, parsed)
    two = output.parse_documents(text_of(second), second, parsed)

    assert len(parses) == 1 and len(parsed) == 1
    assert one == [
        {"name": "db-1", "spec": {"size": 1}, "label": "pre-db-1", "quoted": '{"size":1}', "plain": [1, True, None]}
    ]
    assert two == [
        {
            "name": "db-2",
            "spec": {"size": 2, "tier": "gold"},
            "label": "pre-db-2",
            "quoted": '{"size":2,"tier":"gold"}',
            "plain": [1, True, None],
        }
    ]
    one[0]["plain"].append("changed")  # each answer is its own: the kept parse and the next answer unchanged
    three_state = render_state("db-3", None)
    three = output.parse_documents(text_of(three_state), three_state, parsed)
    assert three == [{"name": "db-3", "spec": None, "label": "pre-db-3", "quoted": "", "plain": [1, True, None]}]


def test_a_text_whose_keys_hold_markers_is_not_kept(parses: list[str]) -> None:
    parsed = output.ParsedTexts()
    for value in ("alpha", "beta"):
        current = render_state(value)
        text = f"{marker(current.nonce, 0)}: v\n"
        assert output.parse_documents(text, current, parsed) == [{value: "v"}]
    assert len(parsed) == 0 and len(parses) == 2


def test_a_go_templates_text_is_not_kept() -> None:
    parsed = output.ParsedTexts()
    current = render_state(verbatim=True)
    assert output.parse_documents("password: s3cret\n", current, parsed) == [{"password": "s3cret"}]
    assert len(parsed) == 0


def test_a_long_text_is_not_kept() -> None:
    parsed = output.ParsedTexts(max_text_bytes=10)
    current = render_state("x")
    assert output.parse_documents(f"a: {marker(current.nonce, 0)}\n", current, parsed) == [{"a": "x"}]
    assert len(parsed) == 0


def test_a_nul_where_a_nonce_stood_is_refused_not_answered_from_the_kept_parse() -> None:
    parsed = output.ParsedTexts()
    first = render_state("x")
    output.parse_documents(f"a: {marker(first.nonce, 0)}\n", first, parsed)
    second = render_state("y")
    with pytest.raises(RenderError, match="not valid YAML"):
        output.parse_documents(f"a: {marker(chr(0), 0)}\n", second, parsed)


def test_an_alias_stays_the_object_of_its_anchor() -> None:
    parsed = output.ParsedTexts()
    for value in ("x", "y"):
        current = render_state(value)
        text = f"a: &shared [{marker(current.nonce, 0)}, 2]\nb: *shared\n"
        [document] = output.parse_documents(text, current, parsed)
        assert document == {"a": [value, 2], "b": [value, 2]}
        assert document["a"] is document["b"]
    assert len(parsed) == 1


def test_an_aliased_scalar_with_a_marker_is_resolved_once() -> None:
    parsed = output.ParsedTexts()
    for size in (1, 2):
        current = render_state({"size": size})
        text = f"a: &value {marker(current.nonce, 0)}\nb: *value\n"
        [document] = output.parse_documents(text, current, parsed)
        assert document == {"a": {"size": size}, "b": {"size": size}}
        assert document["a"] is document["b"]  # one value, as a first parse makes it


def test_an_alias_bomb_is_refused_on_every_render_of_its_template() -> None:
    levels = ["a0: &a0 [{{ instance.metadata.name }}, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    plan = make_plan(("status", "\n".join(levels)))
    renderer = Renderer()
    for name in ("one", "two"):
        inputs = RenderInputs(instance={"metadata": {"name": name}, "spec": {}}, default_namespace="ns")
        with pytest.raises(RenderLimitError):
            renderer.render_status(plan, inputs)
    assert len(renderer._parsed) == 1  # the second render was answered from the first one's parse


def test_the_cache_keeps_the_most_recent_texts_within_its_bounds() -> None:
    parsed = output.ParsedTexts(max_texts=2)
    for shape in ("a", "b", "c"):
        parsed.put(shape, ({shape: 1},))
    assert parsed.get("a") is None and parsed.get("b") == ({"b": 1},) and len(parsed) == 2
    parsed.put("d", ({"d": 1},))  # "b" was used last: "c" goes
    assert parsed.get("c") is None and parsed.get("b") is not None

    by_size = output.ParsedTexts(max_bytes=5)
    by_size.put("abc", ())
    by_size.put("def", ())
    assert by_size.get("abc") is None and by_size.get("def") == () and len(by_size) == 1


def test_a_renderer_renders_the_same_template_for_many_instances_from_one_parse(parses: list[str]) -> None:
    content = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ instance.metadata.name }}\n"
    plan = make_plan(("provision", content + "data:\n  size: {{ instance.spec.parameters.size }}\n"))
    renderer = Renderer()
    for name, size in (("a", 1), ("b", 2), ("c", 3)):
        instance = {"metadata": {"name": name}, "spec": {"parameters": {"size": size}}}
        rendered = renderer.render_objects(
            plan, TemplateAction.PROVISION, RenderInputs(instance=instance, default_namespace="ns")
        )
        [obj] = rendered.objects
        assert obj.manifest["metadata"] == {"name": name, "namespace": "ns"} and obj.manifest["data"] == {"size": size}
    assert len(parses) == 1
