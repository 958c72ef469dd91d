"""Scenario 5b: a time-bounded hypothesis fuzz of the plan template renderer (``opbroker.rendering.Renderer``).

Random templates — mostly built from a grammar of what plan authors write (the template functions and
filters, loops, conditionals, macros, recursion, string arithmetic, YAML around it), some pure random
text — with random request parameters, rendered for a random action (provision, status, sources,
clusterSelector). The renderer's promise: every failure is a ``RenderError`` (or a subclass), and a render
stops itself at its time limit. Anything else is a crash; a render that outlives its limit by more than
``SLACK`` seconds is a hang.

Run in its own process (``python -m bench.fuzz_renderer --seconds 60 --out result.json``) so that a real
hang cannot stall the suite: the parent kills it after the time is up and then reads ``<out>.last`` — the
input being rendered at that moment — as the reproduction.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from opbroker.api import SFPlan, TemplateAction
from opbroker.rendering import Limits, Renderer, RenderError, RenderInputs

LIMITS = Limits(timeout=1.0, max_output_bytes=1 << 18)
SLACK = 1.5
ACTIONS = ("provision", "status", "sources", "clusterSelector")

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_strings = st.sampled_from(
    ["x", "", "a: b", "\nkind: ClusterRole", "{{ 7*7 }}", "'", '"', "#", "&a", "*a", "- -", "é", "\x00", "%s", "{0}"]
) | st.text(max_size=12)
_atoms = st.one_of(
    st.integers(-(2**40), 2**40).map(str),
    st.sampled_from(["100000", "99999999", "2**64", "10**9", "-1", "0", "1.5", "none", "true", "[]", "{}"]),
    _strings.map(lambda s: json.dumps(s)),
    st.sampled_from(
        [
            "instance.metadata.name",
            "instance.spec.parameters",
            "plan.spec.context",
            "service",
            "binding",
            "undefined_name",
            "instance.spec",
            "sources",
            "database",
            "database.status.phase",
            "range(5)",
            "range(100000)",
            "loop",
            "self",
            "instance.__class__",
            "''.__class__",
            "lipsum",
            "namespace()",
            "cycler",
            "joiner()",
        ]
    ),
)


def _expression() -> st.SearchStrategy[str]:
    def grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        call = st.tuples(
            st.sampled_from(
                [
                    "parameter",
                    "default",
                    "required",
                    "b64enc",
                    "b64dec",
                    "toYaml",
                    "fromYaml",
                    "toJson",
                    "fromJson",
                    "sha224",
                    "merge",
                    "omit",
                    "pick",
                    "dict",
                    "registry",
                    "setRegistry",
                    "generatePassword",
                    "range",
                    "lipsum",
                ]
            ),
            st.lists(inner, max_size=3),
        ).map(lambda t: f"{t[0]}({', '.join(t[1])})")
        pointer = _strings.map(lambda s: f'parameter("/{s}")')
        binary = st.tuples(
            inner, st.sampled_from(["*", "+", "%", "**", "~", "//", "and", "or", "==", "in"]), inner
        ).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
        filtered = st.tuples(
            inner,
            st.sampled_from(
                [
                    "upper",
                    "list",
                    "length",
                    "join",
                    "join(',')",
                    "indent(4)",
                    "indent(999999)",
                    "replace('a', 'aaaaaaaa')",
                    "center(80)",
                    "center(10**6)",
                    "default('x')",
                    "b64enc",
                    "toYaml",
                    "toJson",
                    "sha224",
                    "tojson",
                    "first",
                    "last",
                    "sort",
                    "unique",
                    "sum",
                    "int",
                    "string",
                    "trim",
                    "wordwrap(3)",
                    "format(1)",
                    "batch(2)|list",
                    "map('upper')|list",
                    "d(none)",
                    "required",
                    "reverse",
                    "dictsort",
                    "items",
                    "attr('x')",
                ]
            ),
        ).map(lambda t: f"({t[0]})|{t[1]}")
        method = st.tuples(
            inner, st.sampled_from(["ljust(10)", "zfill(10**7)", "split(',')", "format(1)", "keys()", "items()"])
        ).map(lambda t: f"({t[0]}).{t[1]}")
        listing = st.lists(inner, max_size=3).map(lambda items: f"[{', '.join(items)}]")
        mapping = st.lists(st.tuples(_strings, inner), max_size=3).map(
            lambda kvs: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in kvs) + "}"
        )
        return call | pointer | binary | filtered | method | listing | mapping

    return st.recursive(_atoms, grow, max_leaves=8)


def _body() -> st.SearchStrategy[str]:
    expression = _expression()

    def grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        loop = st.tuples(expression, inner).map(lambda t: f"{{% for x in {t[0]} %}}{t[1]}{{% endfor %}}")
        condition = st.tuples(expression, inner, inner).map(
            lambda t: f"{{% if {t[0]} %}}{t[1]}{{% else %}}{t[2]}{{% endif %}}"
        )
        assign = st.tuples(expression, inner).map(lambda t: f"{{% set v = {t[0]} %}}{t[1]}{{{{ v }}}}")
        macro = st.tuples(inner, st.sampled_from(["f(n-1)", "f(n+1)", "f(n-1) ~ f(n-1)", "n"])).map(
            lambda t: (
                f"{{% macro f(n) %}}{{% if n %}}{{{{ {t[1]} }}}}{{% endif %}}{t[0]}{{% endmacro %}}{{{{ f(30) }}}}"
            )
        )
        include = st.sampled_from(['{% include "snippet" %}', '{% include "missing" %}', '{% import "snippet" as s %}'])
        raw = st.sampled_from(["{% raw %}{{{% endraw %}", "{#", "{{", "{% endfor %}", "\n---\n", "\n  ", ": ", "- "])
        sequence = st.lists(inner, min_size=2, max_size=4).map("".join)
        return loop | condition | assign | macro | include | raw | sequence

    leaf = expression.map(lambda e: f"{{{{ {e} }}}}") | _strings
    return st.recursive(leaf, grow, max_leaves=10)


_YAML = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: {value}\n{tail}"
_templates = st.one_of(
    st.tuples(_body(), _body(), _body()).map(lambda t: _YAML.format(name=t[0], value=t[1], tail=t[2])),
    st.tuples(_body(), _body()).map(lambda t: f"provision:\n  state: {t[0]}\n  description: {t[1]}\n"),
    st.tuples(_body(), _body()).map(lambda t: f"database:\n  apiVersion: v1\n  kind: {t[0]}\n  name: {t[1]}\n"),
    _body(),
    st.text(max_size=200),
)
cases = st.fixed_dictionaries(
    {
        "action": st.sampled_from(ACTIONS),
        "template": _templates,
        "snippet": _body(),
        "parameters": st.dictionaries(st.text(max_size=8), _json, max_size=5),
    }
)


class RendererFuzz:
    def __init__(self, last: Path) -> None:
        self.renderer = Renderer(limits=LIMITS)
        self.last = last
        self.outcomes: Counter[str] = Counter()
        self.by_action: Counter[str] = Counter()
        self.crashes: list[dict[str, Any]] = []
        self.slow: list[dict[str, Any]] = []
        self.longest = 0.0
        self.deadline = 0.0

    def render(self, case: dict[str, Any]) -> None:
        if time.monotonic() > self.deadline:
            return
        self.last.write_text(json.dumps(case, default=repr))
        plan = SFPlan.model_validate(
            {
                "metadata": {"name": "fuzz"},
                "spec": {
                    "name": "fuzz",
                    "id": "fuzz",
                    "serviceId": "s",
                    "description": "fuzzed",
                    "snippets": {"snippet": case["snippet"]},
                    "templates": [{"action": case["action"], "type": "jinja2", "content": case["template"]}],
                },
            }
        )
        instance = {
            "apiVersion": "osb.servicefabrik.io/v1alpha1",
            "kind": "SFServiceInstance",
            "metadata": {"name": "fuzz-1", "namespace": "team", "uid": "u-1"},
            "spec": {"instanceId": "fuzz-1", "serviceId": "s", "planId": "fuzz", "parameters": case["parameters"]},
        }
        inputs = RenderInputs(instance=instance, default_namespace="team", sources={"database": {"status": {}}})
        started = time.monotonic()
        try:
            if case["action"] == "provision":
                self.renderer.render_objects(plan, TemplateAction.PROVISION, inputs)
            elif case["action"] == "status":
                self.renderer.render_status(plan, inputs)
            elif case["action"] == "sources":
                self.renderer.render_sources(plan, inputs)
            else:
                self.renderer.render_cluster_selector(plan, inputs)
            outcome = "rendered"
        except RenderError as exc:
            outcome = type(exc).__name__
        except Exception as exc:
            outcome = f"CRASH {type(exc).__name__}"
            if len(self.crashes) < 20:
                self.crashes.append({"error": f"{type(exc).__name__}: {str(exc)[:300]}", "input": case})
        elapsed = time.monotonic() - started
        self.longest = max(self.longest, elapsed)
        if elapsed > LIMITS.timeout + SLACK and len(self.slow) < 20:
            self.slow.append({"seconds": round(elapsed, 2), "input": case})
        self.outcomes[outcome] += 1
        self.by_action[case["action"]] += 1

    def run(self, seconds: float) -> dict[str, Any]:
        started = time.monotonic()
        self.deadline = started + seconds
        batches = 0
        while time.monotonic() < self.deadline:
            test = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)(
                given(case=cases)(self.render)
            )
            seed(batches)(test)()
            batches += 1
        self.last.unlink(missing_ok=True)
        return {
            "seconds": round(time.monotonic() - started, 1),
            "inputs": sum(self.outcomes.values()),
            "hypothesis_batches": batches,
            "by_action": dict(sorted(self.by_action.items())),
            "outcomes": dict(self.outcomes.most_common()),
            "crashes": self.crashes,
            "crash_count": sum(n for k, n in self.outcomes.items() if k.startswith("CRASH")),
            "renders_over_limit": self.slow,
            "longest_render_s": round(self.longest, 3),
            "time_limit_s": LIMITS.timeout,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    fuzz = RendererFuzz(args.out.with_suffix(".last"))
    args.out.write_text(json.dumps(fuzz.run(args.seconds), indent=2, default=repr))


if __name__ == "__main__":
    main()
