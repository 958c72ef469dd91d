"""Values can never change the structure of rendered YAML, and templates cannot leave the sandbox.

Aspects covered:

* a table of injection payloads, each placed in every kind of position a template can interpolate into
  (plain, quoted, block, mixed with text, list item, flow collections, mapping key, macro, ``{% set %}``
  block, comment), must come out as exactly the same string value with no extra keys or documents;
* the same property over random strings (hypothesis);
* values keep their type when placed alone, become text when mixed, and never parse as YAML;
* classic server-side template injection payloads fail with a :class:`TemplateSecurityError`;
* the two Jinja constructs that bypass interpolation (``{% filter %}``, ``{% call %}`` on non-macros) are refused;
* no files, environment or removed globals are reachable.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opbroker.api import SFPlan, TemplateAction
from opbroker.rendering import Renderer, RenderError, RenderInputs, TemplateSecurityError, state

RENDERER = Renderer()

HEAD = "{%- set p = parameter('/p') %}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n"

#: (position, template body under ``data:``, how the payload should come out under ``data``)
POSITIONS: list[tuple[str, str, Any]] = [
    ("plain", "  v: {{ p }}", lambda p: {"v": p}),
    ("double-quoted", '  v: "{{ p }}"', lambda p: {"v": p}),
    ("single-quoted", "  v: '{{ p }}'", lambda p: {"v": p}),
    ("mixed with text", "  v: pre-{{ p }}-post", lambda p: {"v": f"pre-{p}-post"}),
    ("two interpolations", "  v: {{ 'x' }}-{{ p }}", lambda p: {"v": f"x-{p}"}),
    ("block literal", "  v: |\n    {{ p }}\n", lambda p: {"v": f"{p}\n"}),
    ("block folded", "  v: >-\n    {{ p }}", lambda p: {"v": p}),
    ("list item", "  v:\n  - {{ p }}\n  - fixed", lambda p: {"v": [p, "fixed"]}),
    ("flow sequence", "  v: [{{ p }}, fixed]", lambda p: {"v": [p, "fixed"]}),
    ("flow mapping", "  v: {k: {{ p }}, fixed: 1}", lambda p: {"v": {"k": p, "fixed": 1}}),
    ("mapping key", "  v:\n    {{ p }}: value", lambda p: {"v": {p: "value"}}),
    ("concatenation", "  v: {{ 'a' ~ p ~ 'b' }}", lambda p: {"v": f"a{p}b"}),
    ("macro output", "{% macro q(x) %}<{{ x }}>{% endmacro %}  v: {{ q(p) }}", lambda p: {"v": f"<{p}>"}),
    ("set block", "{% set s %}[{{ p }}]{% endset %}  v: {{ s }}", lambda p: {"v": f"[{p}]"}),
    ("comment", "  # {{ p }}\n  v: fixed", lambda p: {"v": "fixed"}),
    ("toJson", "  v: {{ p | toJson }}", lambda p: {"v": json.dumps(p, ensure_ascii=False, separators=(",", ":"))}),
    ("b64 round trip", "  v: {{ p | b64enc | b64dec }}", lambda p: {"v": p}),
]

PAYLOADS = [
    "\nkind: ClusterRole",
    "x\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: evil",
    "x\n  injected: true",
    "x\ninjected: true",
    "{{ 7*7 }}",
    "{% raw %}{{ 7*7 }}{% endraw %}",
    "${HOME}",
    "'; DROP TABLE users; --",
    '"quoted"',
    "it's",
    "key: value",
    "- item",
    "[a, b]",
    "{a: b}",
    "&anchor value",
    "*alias",
    "!!python/object/apply:os.system ['id']",
    "true",
    "null",
    "~",
    "123",
    "0x1F",
    "1e3",
    "2001-12-14",
    "  leading and trailing  ",
    "#comment",
    "a # b",
    "|",
    ">",
    "? complex",
    "%YAML 1.2",
    "\t\ttabs",
    "\r\nwindows\r\n",
    "line\u2028separator",
    "next\x85line",
    "ünïcödé ✓ 漢字",
    "",
    "@at",
    "`backtick`",
    "a: b\nc: d",
    "...",
    "---",
    "<<: *x",
    "opbrk0000000000000000v0e",
]


def _plan(content: str) -> SFPlan:
    return SFPlan.model_validate(
        {
            "metadata": {"name": "injection"},
            "spec": {
                "name": "p",
                "id": "p",
                "description": "d",
                "serviceId": "s",
                "templates": [{"action": "provision", "type": "jinja2", "content": content}],
            },
        }
    )


PLANS = {name: _plan(HEAD + body) for name, body, _ in POSITIONS}


def _render_data(position: str, payload: Any) -> dict[str, Any]:
    instance = {"metadata": {"name": "i"}, "spec": {"parameters": {"p": payload}}}
    rendered = RENDERER.render_objects(
        PLANS[position], TemplateAction.PROVISION, RenderInputs(instance=instance, default_namespace="ns")
    )
    assert len(rendered.objects) == 1, "a value added a document"
    manifest = rendered.objects[0].manifest
    assert set(manifest) == {"apiVersion", "kind", "metadata", "data"}, "a value added a top-level key"
    assert manifest["metadata"] == {"name": "cm", "namespace": "ns"}
    assert manifest["kind"] == "ConfigMap"
    data: dict[str, Any] = manifest["data"]
    return data


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize(("position", "expected"), [(name, want) for name, _, want in POSITIONS])
def test_payload_stays_the_same_string_in_every_position(position: str, expected: Any, payload: str) -> None:
    assert _render_data(position, payload) == expected(payload)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=st.text(), position=st.sampled_from([name for name, _, _ in POSITIONS]))
def test_random_strings_round_trip(payload: str, position: str) -> None:
    expected = next(want for name, _, want in POSITIONS if name == position)
    assert _render_data(position, payload) == expected(payload)


@pytest.mark.parametrize(
    ("reason", "value", "want_plain", "want_mixed"),
    [
        ("an int stays an int alone", 5432, 5432, "x-5432"),
        ("a float stays a float alone", 9.6, 9.6, "x-9.6"),
        ("a bool stays a bool alone, JSON-spelt in text", True, True, "x-true"),
        ("null is pruned alone, empty in text", None, None, "x-"),
        ("a dict placed alone is structure the author asked for", {"a": [1]}, {"a": [1]}, 'x-{"a":[1]}'),
        ("a string that reads like YAML stays a string", "{a: [1]}", "{a: [1]}", "x-{a: [1]}"),
        ("a string that reads like a bool stays a string", "true", "true", "x-true"),
    ],
)
def test_values_keep_their_type_alone_and_become_text_when_mixed(
    reason: str, value: Any, want_plain: Any, want_mixed: str
) -> None:
    plain = _render_data("plain", value)
    assert plain == ({} if want_plain is None else {"v": want_plain}), reason
    assert _render_data("mixed with text", value) == {"v": f"pre-{want_mixed.removeprefix('x-')}-post"}, reason


def test_fromyaml_is_the_only_way_a_string_becomes_structure() -> None:
    plan = _plan(HEAD + "  v: {{ fromYaml(p) }}")
    instance = {"metadata": {"name": "i"}, "spec": {"parameters": {"p": "a: 1\nb: [x]"}}}
    rendered = RENDERER.render_objects(
        plan, TemplateAction.PROVISION, RenderInputs(instance=instance, default_namespace="n")
    )
    assert rendered.objects[0].manifest["data"] == {"v": {"a": 1, "b": ["x"]}}


def test_fromyaml_refuses_aliases_so_a_value_cannot_expand() -> None:
    bomb = 'a: &a ["x","x"]\nb: &b [*a,*a]\nc: &c [*b,*b]'
    plan = _plan(HEAD + "  v: {{ fromYaml(p) | toJson }}")
    instance = {"metadata": {"name": "i"}, "spec": {"parameters": {"p": bomb}}}
    with pytest.raises(RenderError, match="aliases are not allowed"):
        RENDERER.render_objects(plan, TemplateAction.PROVISION, RenderInputs(instance=instance, default_namespace="n"))


@pytest.mark.parametrize(
    "body",
    [
        "{% set s %}{{ p }}{% endset %}  v: {{ s | upper }}",
        "{% macro q() %}{{ p }}{% endmacro %}  v: {{ q() | upper }}",
        "{% macro q() %}{{ p }}{% endmacro %}  v: {{ q() | replace('opbrk', 'x') }}",
    ],
)
def test_text_transformed_after_output_is_an_error_not_debris(body: str) -> None:
    """Filters applied to rendered text (not to values) would mangle the markers: refuse, naming the cause."""
    instance = {"metadata": {"name": "i"}, "spec": {"parameters": {"p": "x"}}}
    with pytest.raises(RenderError, match="altered after it was output"):
        RENDERER.render_objects(
            _plan(HEAD + body), TemplateAction.PROVISION, RenderInputs(instance=instance, default_namespace="n")
        )


SSTI_PAYLOADS = [
    "{{ ''.__class__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''['__class__'] }}",
    "{{ ()|attr('__class__') }}",
    "{{ (1).__class__.__base__ }}",
    "{{ self.__init__.__globals__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ joiner.__init__.__globals__.os }}",
    "{{ namespace.__init__.__globals__.os }}",
    "{{ lipsum.__globals__['os'].popen('id').read() }}",
    "{{ lipsum['__globals__'] }}",
    "{{ request.application.__globals__.__builtins__ }}",
    "{{ config.__class__.__init__.__globals__['os'] }}",
    "{{ dict.__globals__ }}",
    "{{ range.__globals__ }}",
    "{{ parameter.__globals__['os'] }}",
    "{{ toYaml.__globals__.yaml }}",
    "{{ '{0.__class__}'.format(1) }}",
    "{{ '{0.__globals__}'.format(parameter) }}",
    "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
    "{{ instance.update({'pwned': 1}) }}",
    "{{ instance.spec.parameters.clear() }}",
    "{{ instance.spec.parameters.pop('p') }}",
    "{{ [1].append(2) }}",
    "{% call '{0}'.format(parameter('/p')) %}{% endcall %}",
    "{% call toYaml(parameter('/p')) %}{% endcall %}",
]


@pytest.mark.parametrize("payload", SSTI_PAYLOADS)
def test_classic_template_injection_payloads_are_refused(payload: str) -> None:
    plan = _plan(HEAD + "  v: " + payload)
    instance = {"metadata": {"name": "i"}, "spec": {"parameters": {"p": "x"}}}
    with pytest.raises(TemplateSecurityError) as caught:
        RENDERER.render_objects(plan, TemplateAction.PROVISION, RenderInputs(instance=instance, default_namespace="n"))
    assert isinstance(caught.value, RenderError)
    assert "plan 'injection', action 'provision', template provision line 7" in str(caught.value)
    assert "not allowed" in str(caught.value) or "only with macros" in str(caught.value)


def test_inputs_are_not_mutated_by_a_refused_template() -> None:
    parameters = {"p": "x"}
    instance = {"metadata": {"name": "i"}, "spec": {"parameters": parameters}}
    with pytest.raises(TemplateSecurityError):
        RENDERER.render_objects(
            _plan(HEAD + "  v: {{ instance.spec.parameters.update({'p': 'y'}) }}"),
            TemplateAction.PROVISION,
            RenderInputs(instance=instance, default_namespace="n"),
        )
    assert parameters == {"p": "x"}


@pytest.mark.parametrize(
    ("reason", "body", "message"),
    [
        (
            "filter blocks emit text that bypasses interpolation",
            "{% filter upper %}v: x{% endfilter %}",
            "{% filter %}",
        ),
        (
            "no file loader: includes only reach snippets",
            '{% include "/etc/passwd" %}',
            "snippet '/etc/passwd' not found",
        ),
        ("no file loader for imports either", '{% import "../api/catalog.py" as x %}', "not found"),
        ("removed globals are undefined", "  v: {{ namespace(a=1) }}", "'namespace' is undefined"),
        ("no os/environment access", "  v: {{ os.environ }}{{ environ() }}", "'environ' is undefined"),
        ("the random filter is removed (re-renders must be stable)", "  v: {{ [1, 2] | random }}", "random"),
    ],
)
def test_constructs_outside_the_contract_are_refused(reason: str, body: str, message: str) -> None:
    instance = {"metadata": {"name": "i"}, "spec": {"parameters": {"p": "x"}}}
    with pytest.raises(RenderError, match="plan 'injection'") as caught:
        RENDERER.render_objects(
            _plan(HEAD + body), TemplateAction.PROVISION, RenderInputs(instance=instance, default_namespace="n")
        )
    assert message in str(caught.value), reason


def test_removed_helpers_render_nothing_rather_than_objects() -> None:
    instance = {"metadata": {"name": "i"}, "spec": {"parameters": {"p": "x"}}}
    plan = _plan(HEAD + "  a: {{ cycler }}\n  b: {{ lipsum }}\n  c: {{ joiner }}\n  d: keep")
    rendered = RENDERER.render_objects(
        plan, TemplateAction.PROVISION, RenderInputs(instance=instance, default_namespace="n")
    )
    assert rendered.objects[0].manifest["data"] == {"d": "keep"}


def test_each_render_has_a_nonce_of_its_own() -> None:
    """The marker's nonce: 16 hex digits, a new one per render (a keyed hash of a counter: no template sees the
    key), so a marker copied from one render is literal text in the next."""
    nonces = [state.fresh_nonce() for _ in range(1000)]
    assert len(set(nonces)) == 1000
    assert all(len(n) == 16 and int(n, 16) >= 0 for n in nonces)
