"""Renderer: renders per second of the PostgreSQL plan's provision template, against bare jinja2 on the same
template text (a plain Environment, output parsed with PyYAML's C safe loader — what any YAML-templating
controller must at least do) and against bare jinja2 text output alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
import yaml

from opbroker.api import SFPlan, TemplateAction
from opbroker.api.manifests import load_resources
from opbroker.rendering import Renderer, RenderInputs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "catalog"


def _rate(work: Callable[[], Any], seconds: float) -> float:
    work()  # warm caches (compiled templates)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        work()
        count += 1
    return count / (time.perf_counter() - started)


def run(seconds: float = 3.0) -> dict[str, Any]:
    (plan,) = load_resources((EXAMPLES / "postgresql-zalando-plan.yaml").read_text())
    assert isinstance(plan, SFPlan)
    instance = yaml.safe_load((EXAMPLES / "render-inputs" / "instance.yaml").read_text())
    renderer = Renderer()
    inputs = RenderInputs(instance=instance, default_namespace="default")
    spec = plan.spec.template(TemplateAction.PROVISION)
    assert spec is not None and spec.content is not None
    snippets = plan.spec.snippets or {}
    environment = jinja2.Environment(loader=jinja2.DictLoader(snippets))
    bare = environment.from_string(spec.content)
    variables = {"plan": plan.to_manifest(), "instance": instance, "service": {}}

    def ours() -> None:
        renderer.render_objects(plan, TemplateAction.PROVISION, inputs)

    def bare_yaml() -> None:
        list(yaml.load_all(bare.render(variables), Loader=yaml.CSafeLoader))

    def bare_text() -> None:
        bare.render(variables)

    rates = {
        name: _rate(work, seconds)
        for name, work in (("opbroker", ours), ("jinja2+yaml", bare_yaml), ("jinja2", bare_text))
    }
    return {
        "template": "examples/catalog/postgresql-zalando-plan.yaml provision",
        "renders_per_second": {k: round(v, 1) for k, v in rates.items()},
        "ratio_to_jinja2_yaml": round(rates["opbroker"] / rates["jinja2+yaml"], 3),
        "ratio_to_jinja2_text": round(rates["opbroker"] / rates["jinja2"], 3),
    }
