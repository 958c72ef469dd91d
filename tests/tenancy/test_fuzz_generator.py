"""The tenant fuzzer's generator is pure and its family table explicit (``tests/tenancy/fuzz/generator.py``): the
same seed gives the same actions (a failure's seed is enough to replay it), every family is reachable, a disabled
family is gone and must be named, and delta debugging finds a small failing sub-list."""

from __future__ import annotations

import random

import pytest

from tests.tenancy.fuzz import generator
from tests.tenancy.fuzz.generator import FAMILIES, Action, ddmin, generate, placeholders, substitute


def test_the_same_seed_gives_the_same_actions() -> None:
    assert generate(7, 300) == generate(7, 300)
    assert generate(7, 300).actions != generate(8, 300).actions


def test_a_seed_does_not_depend_on_the_global_random_state() -> None:
    random.seed(1)
    first = generate(11, 100)
    random.seed(2)
    assert generate(11, 100) == first


def test_every_family_appears_and_platform_steps_come_every_k() -> None:
    plan = generate(3, 2000, platform_every=20, disabled={})
    assert {a.family for a in plan.actions} == {f.name for f in FAMILIES} | {"platform"}
    assert not {a.family for a in generate(3, 2000).actions} & set(generator.DISABLED)
    assert [i for i, a in enumerate(plan.actions) if a.verb == "platform"] == list(range(19, 2000, 20))


def test_a_disabled_family_is_not_generated_and_must_exist() -> None:
    plan = generate(3, 500, disabled={"huge": "a reason"})
    assert "huge" not in {a.family for a in plan.actions}
    assert plan.disabled == (("huge", "a reason"),)
    with pytest.raises(ValueError, match="unknown action families"):
        generate(3, 5, disabled={"no-such-family": "typo"})


def test_every_disabled_family_says_why() -> None:
    for name, reason in generator.DISABLED.items():
        assert name in generator.FAMILY_NAMES and len(reason) > 20, name


def test_actions_are_frozen_and_print_what_is_sent() -> None:
    act = generate(5, 1).actions[0]
    with pytest.raises(AttributeError):
        act.name = "x"  # type: ignore[misc]
    assert act.plural in str(act) and act.verb in str(act)


def test_every_placeholder_is_one_the_executor_fills() -> None:
    text = " ".join(a.payload + a.name for a in generate(9, 3000).actions)
    used = set(generator.PLACEHOLDER.findall(text))
    assert used <= placeholders()
    known = {name: "X" for name in placeholders()}
    assert not generator.PLACEHOLDER.search(str(substitute([{"${victim.ns}": ["${victim.sf_instance_id}"]}], known)))


def test_large_values_stay_bounded() -> None:
    assert max(len(a.payload) for a in generate(13, 3000).actions) < 400_000


def test_ddmin_finds_the_two_actions_that_together_fail() -> None:
    actions = [Action("ordinary", "delete", "sfplans", str(i)) for i in range(64)]
    culprits = {actions[10], actions[50]}
    trials: list[int] = []

    def fails(candidate: list[Action]) -> bool:
        trials.append(len(candidate))
        return culprits <= set(candidate)

    assert ddmin(actions, fails, lambda: True) == [actions[10], actions[50]]
    assert len(trials) < 200


def test_ddmin_stops_when_the_budget_is_spent() -> None:
    actions = [Action("ordinary", "delete", "sfplans", str(i)) for i in range(64)]
    assert ddmin(actions, lambda c: actions[3] in c, lambda: False) == actions


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ("/v2/service_instances/abc", False),
        ("/v2/service_instances/abc/last_operation", False),
        ("/v2/service_instances/abc/service_bindings/b-1", False),
        ("/v2/service_instances/x%2F..%2Fabc", False),  # escaped: one segment, the tenant's own odd id
        ("/v2/service_instances/%252e%252e", False),
        ("/v2/service_instances/..", True),
        ("/v2/service_instances/%2e%2e", True),
        ("/v2/service_instances/x/../abc", True),
        ("/v2/service_instances/abc/service_bindings/b/c", True),
    ],
)
def test_a_broker_path_is_malformed_when_an_id_was_put_in_unescaped(path: str, bad: bool) -> None:
    from tests.tenancy.fuzz.invariants import malformed

    assert malformed(path) is bad
