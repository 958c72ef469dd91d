"""The reliability harness (bench/reliability.py) in small: CI exercises it on every run.

Aspects covered, on one shared local stack: the controller SIGKILLed at random points during a small
provisioning run still converges with nothing lost, duplicated or orphaned (scenario 1); concurrent
identical and conflicting OSB requests for the same ids get OSB's answers and leave exactly the state
those answers promise (scenario 4: binds and deprovisions on different ids, no id re-created); a bind
racing a deprovision ends consistently: never both accepted, the one accepted succeeds, the one refused
gets an OSB answer, nothing is left behind; an instance provisioned again under the same id gets a registry
of its own, not its previous incarnation's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from bench import conflicts, scenarios
from bench.common import Bench, bench_stack

pytestmark = pytest.mark.apiserver  # its own fixtures start a local control plane (tests/conftest.py)


@pytest.fixture(scope="module")
def bench() -> Iterator[Bench]:
    with bench_stack(f"smoke-reliability-{os.getpid()}", workers=4) as stack:
        yield stack


def test_controller_kills_during_provisioning_lose_and_duplicate_nothing(bench: Bench) -> None:
    result = scenarios.kills_on(
        bench,
        bench.namespace("smoke-kills"),
        count=10,
        kills=3,
        delay=(1.0, 2.5),
        seed=7,
        deadline_seconds=90.0,
        converge_timeout=45.0,
    )
    assert result["kills"] == 3
    assert result["workload"]["problems"] == []
    assert result["convergence"]["converged"], result["convergence"]
    assert result["violations"] == 0
    assert result["expected_final"]["live_instances"] + result["expected_final"]["deprovisioned_instances"] == 10


def test_conflicting_requests_get_osb_answers_and_leave_the_promised_state(bench: Bench) -> None:
    result = conflicts.run(bench, bench.namespace("smoke-conflicts"), ids=3, seed=7, overlap=False, recreate=False)
    assert result["server_errors"] == 0
    assert result["answer_violations"] == []
    assert result["resource_check"]["converged"], result["resource_check"]
    answers = result["answers"]
    assert answers.get("round 1 provision 409 Conflict", 0) > 0  # conflicting bodies were refused
    assert any(key.startswith("round 2 update 422 ConcurrencyError") for key in answers)


def test_bind_racing_a_deprovision_ends_consistently(bench: Bench) -> None:
    result = conflicts.race_probe(bench, bench.namespace("smoke-race"), trials=3, seed=7)
    assert result["answers_off_osb"] == []
    assert result["both_accepted"] == 0, result["outcomes"]
    assert sum(result["outcomes"].values()) == 3
    # Each trial: one of the two accepted and its operation succeeded, or both refused (the platform retries).
    won = result["last_operation_of_the_one_accepted"]
    # On failure, say what the unfinished one was waiting for (its instance's status), not only its state.
    unfinished = (won, result["stuck_examples"], result["unfinished_examples"], result["resource_check"])
    assert {state for states in won.values() for state in states} <= {"succeeded"}, unfinished
    assert sum(sum(states.values()) for states in won.values()) + result["both_refused"] == 3
    assert result["stuck_deleting_instances"] == 0
    assert result["resource_check"]["converged"], result["resource_check"]
    assert result["violations"] == 0


def test_bind_and_deprovision_at_once_are_not_both_accepted(bench: Bench) -> None:
    assert conflicts.race_probe(bench, bench.namespace("smoke-race-2"), trials=3, seed=8)["both_accepted"] == 0


def test_an_instance_provisioned_again_gets_its_own_registry(bench: Bench) -> None:
    assert conflicts.recreate_probe(bench, bench.namespace("smoke-again"), trials=1, seed=7)["violations"] == 0
