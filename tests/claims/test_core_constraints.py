"""Environment constraints of registered services, with the seed's own examples as the table.

Aspects: no constraint, inclusions only, exclusions (``!env``) and their precedence, the seed's
"``!prod`` with ``dev`` makes ``dev`` redundant and still offers ``stage``", blank entries, and which
environments a constraint names (those get a catalog).
"""

from __future__ import annotations

import pytest

from opbroker.controller.claims.core import constraints

# (reason, environments, {environment: offered})
CASES = [
    ("absent: offered everywhere", None, {"dev": True, "stage": True, "prod": True}),
    ("empty list: offered everywhere", [], {"dev": True, "prod": True}),
    ("seed: !prod excludes prod", ["!prod"], {"prod": False, "dev": True, "stage": True}),
    (
        "seed: !prod with dev — dev is redundant, stage is offered though not listed",
        ["!prod", "dev"],
        {"dev": True, "stage": True, "prod": False},
    ),
    ("inclusions only: exactly those", ["dev", "stage"], {"dev": True, "stage": True, "prod": False}),
    ("seed: exclusion has precedence over inclusion", ["prod", "!prod"], {"prod": False, "dev": True}),
    ("order does not matter", ["!prod", "prod"], {"prod": False, "dev": True}),
    ("two exclusions", ["!prod", "!stage"], {"prod": False, "stage": False, "dev": True, "qa": True}),
    ("blank entries are ignored", ["", "!", "  ", "dev"], {"dev": True, "prod": False}),
    ("surrounding spaces are ignored", [" !prod "], {"prod": False, "dev": True}),
]


@pytest.mark.parametrize(("reason", "environments", "expected"), CASES, ids=[c[0] for c in CASES])
def test_offered(reason: str, environments: list[str] | None, expected: dict[str, bool]) -> None:
    parsed = constraints.parse(environments)
    assert {env: constraints.offered(parsed, env) for env in expected} == expected, reason


def test_named_environments_are_the_inclusions() -> None:
    assert constraints.named(constraints.parse(["!prod", "dev", "stage"])) == {"dev", "stage"}
    assert constraints.named(constraints.parse(["!prod"])) == frozenset()
    assert constraints.parse(None).unconstrained


@pytest.mark.parametrize(
    ("environments", "environment", "text"),
    [
        (["!prod"], "prod", "environment 'prod' is excluded (!prod)"),
        (["dev", "stage"], "prod", "environment 'prod' is not among ['dev', 'stage']"),
    ],
)
def test_explain(environments: list[str], environment: str, text: str) -> None:
    assert constraints.explain(constraints.parse(environments), environment) == text
