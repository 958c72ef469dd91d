"""Checking a plan offline (what `pulumi preview` and `opbroker validate` report before rollout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from opbroker.api import SFPlan
from opbroker.api.manifests import load_resources
from opbroker.rendering.checking import check_plan

REPO = Path(__file__).resolve().parents[2]


def plan_with(content: str, action: str = "provision") -> SFPlan:
    return SFPlan.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {
                "name": "p",
                "id": "p",
                "serviceId": "s",
                "description": "d",
                "templates": [{"action": action, "type": "jinja2", "content": content}],
            },
        }
    )


def test_the_example_plans_have_no_errors() -> None:
    for path in (REPO / "examples/catalog/postgresql-zalando-plan.yaml", REPO / "examples/demo_operator/catalog.yaml"):
        for plan in load_resources(path.read_text()):
            if isinstance(plan, SFPlan):
                assert check_plan(plan).errors == (), path


def test_templates_that_need_live_objects_only_warn() -> None:
    (plan,) = load_resources((REPO / "examples/catalog/postgresql-zalando-plan.yaml").read_text())
    assert isinstance(plan, SFPlan)
    warnings = check_plan(plan).warnings
    assert [w.path for w in warnings] == ["templates[3]", "templates[4]"]  # bind and unbind read the live cluster
    assert "required: the live postgresql object" in warnings[0].message


@pytest.mark.parametrize(
    ("reason", "content", "fragment"),
    [
        ("syntax error", "metadata: {{ instance.metadata.name ", "syntax error"),
        ("sandbox escape", "x: {{ ''.__class__.__mro__ }}", "blocked by the sandbox"),
        ("runaway loop", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "longer"),
    ],
)
def test_broken_templates_are_errors_naming_the_template(reason: str, content: str, fragment: str) -> None:
    verdict = check_plan(plan_with(content))
    assert not verdict.ok, reason
    assert verdict.errors[0].path == "templates[0]"
    assert fragment in verdict.errors[0].message, verdict.errors[0].message


def test_output_that_may_depend_on_the_request_only_warns() -> None:
    verdict = check_plan(plan_with("just: a map"))
    assert verdict.ok
    assert "missing apiVersion, kind, metadata.name" in verdict.warnings[0].message


@pytest.mark.process
def test_the_seeds_gotemplate_plan_checks_clean_through_the_go_renderer(seed_manifests: list[Path]) -> None:
    seed = next(p for p in seed_manifests if p.name == "sfplan-postgresql-zalando.yaml")
    (plan,) = load_resources(seed.read_text())
    assert isinstance(plan, SFPlan)
    verdict = check_plan(plan)
    assert verdict.errors == ()
    # bind/unbind read the live cluster (`get .postgresql "spec"`), which a made-up request does not have.
    assert any("trial render of bind" in w.message for w in verdict.warnings)
