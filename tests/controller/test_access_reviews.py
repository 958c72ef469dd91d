"""The access reviews' cache: an answer is remembered for its time to live, the cache is bounded, and one
question is asked once at a time — workers asking the same question together send one review."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from opbroker.controller.runtime.access import Access, AccessReviews

pytestmark = pytest.mark.unit

SECRETS = Access("system:serviceaccount:team-a:plan", "get", "", "secrets", "team-a")
DEPLOYMENTS = Access("system:serviceaccount:team-a:plan", "list", "apps", "deployments", None)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_answer_is_remembered_for_its_time_to_live() -> None:
    clock, questions = Clock(), []
    reviews = AccessReviews(lambda access: questions.append(access) or True, ttl_seconds=60, clock=clock)
    assert reviews.allowed(SECRETS) and reviews.allowed(SECRETS)
    clock.now += 59
    assert reviews.allowed(SECRETS)
    assert questions == [SECRETS]
    clock.now += 2
    assert reviews.allowed(SECRETS)
    assert questions == [SECRETS, SECRETS]
    assert reviews.asked == 2


def test_the_cache_forgets_the_oldest_answer_past_its_bound() -> None:
    questions: list[Access] = []
    reviews = AccessReviews(lambda access: questions.append(access) or False, clock=Clock(), max_answers=1)
    assert not reviews.allowed(SECRETS)
    assert not reviews.allowed(DEPLOYMENTS)
    assert not reviews.allowed(SECRETS)
    assert questions == [SECRETS, DEPLOYMENTS, SECRETS]


def test_workers_asking_the_same_question_together_send_one_review() -> None:
    release, asking = threading.Event(), threading.Event()
    questions: list[Access] = []

    def ask(access: Access) -> bool:
        questions.append(access)
        if access == SECRETS:
            asking.set()
            assert release.wait(10)
        return True

    reviews = AccessReviews(ask, clock=Clock())
    with ThreadPoolExecutor(9) as pool:
        first = pool.submit(reviews.allowed, SECRETS)
        assert asking.wait(10)
        others = [pool.submit(reviews.allowed, SECRETS) for _ in range(7)]
        other_question = pool.submit(reviews.allowed, DEPLOYMENTS)  # another question is not held up
        assert other_question.result(10) is True
        release.set()
        assert first.result(10) and all(other.result(10) for other in others)
    assert questions.count(SECRETS) == 1
    assert reviews.asked == 2


def test_a_waiter_asks_itself_when_the_asker_failed() -> None:
    calls = 0
    started, fail = threading.Event(), threading.Event()

    def ask(access: Access) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            started.set()
            assert fail.wait(10)
            raise ConnectionError("the API server went away")
        return True

    reviews = AccessReviews(ask, clock=Clock())
    with ThreadPoolExecutor(2) as pool:
        failing = pool.submit(reviews.allowed, SECRETS)
        assert started.wait(10)
        waiting = pool.submit(reviews.allowed, SECRETS)
        fail.set()
        with pytest.raises(ConnectionError):
            failing.result(10)
        assert waiting.result(10) is True
    assert calls == 2
