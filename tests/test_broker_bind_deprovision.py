"""A bind and a deprovision of the same instance: never both accepted (real HTTP, real API server, stand-in).

Aspects: a bind on an instance already being deprovisioned (deleted, or only marked by a deprovision that
never got to its DELETE, even after the controller moved the state on) is refused with 422
ConcurrencyError and records no binding; a deprovision while a binding exists is refused with 422
BindingsExist and leaves the instance as it was. Then the three ways the two can interleave inside the
broker, forced by holding one request at a chosen step (the repository methods are wrapped): the
deprovision's mark before the bind's fence (the bind withdraws its binding: 422 ConcurrencyError), the
bind's fence between the deprovision's count and its mark (the deprovision counts again: 422
BindingsExist), and a true tie, both past their checks at once (exactly one wins; the deprovision waits
for the withdrawn binding to go before its DELETE). Last, an identical bind arriving while the first one's
binding is not past its fence waits for it instead of answering from a binding that may be withdrawn, and
so does a deprovision counting such a binding (then refused: one winner rather than two refusals).
"""

# ruff: noqa: F811  (test functions take the imported fixtures as arguments)

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from opbroker.api import conventions
from opbroker.broker import records
from opbroker.broker.records import Kind, Record
from opbroker.broker.repository import Repository
from tests.broker_support import (  # noqa: F401  (pytest fixtures)
    ASYNC_PLAN,
    GROUP,
    INSTANCES,
    SERVICE,
    VERSION,
    Harness,
    StandInController,
    broker,
    new_id,
    osb,
    provision_body,
    stand_in,
    wait_for,
)

INCOMPLETE = {"accepts_incomplete": "true"}
DEPROVISION = {"service_id": SERVICE, "plan_id": ASYNC_PLAN, **INCOMPLETE}
BIND = {"service_id": SERVICE, "plan_id": ASYNC_PLAN}


def instance_url(instance_id: str) -> str:
    return f"/v2/service_instances/{instance_id}"


def binding_url(instance_id: str, binding_id: str) -> str:
    return f"{instance_url(instance_id)}/service_bindings/{binding_id}"


def ready_instance(osb: httpx.Client, stand_in: StandInController, harness: Harness, *, annotated: bool = True) -> str:
    """A succeeded instance. Not ``annotated``: its annotations removed, like an instance created before the
    bind fence existed (a bind's fence then tests the ``resourceVersion``, not ``lastOperation.id``)."""
    instance_id = new_id()
    response = osb.put(instance_url(instance_id), params=INCOMPLETE, json=provision_body())
    assert response.status_code == 202, response.text
    name = conventions.resource_name(instance_id)
    created = stand_in.get("instance", harness.namespace, name)
    assert created is not None and created["metadata"]["annotations"] == {records.ANNOTATION_BIND_FENCE: ""}
    if not annotated:
        stand_in.custom.patch_namespaced_custom_object(
            GROUP, VERSION, harness.namespace, INSTANCES, name, {"metadata": {"annotations": None}}
        )
    stand_in.succeed("instance", harness.namespace, name)
    return instance_id


def repository_of(harness: Harness) -> Repository:
    repository: Repository = harness.app.state.broker.repository
    return repository


def instance_of(stand_in: StandInController, harness: Harness, instance_id: str) -> dict[str, Any]:
    found = stand_in.get("instance", harness.namespace, conventions.resource_name(instance_id))
    assert found is not None
    return found


def in_thread(call: Callable[[], httpx.Response]) -> tuple[threading.Thread, dict[str, httpx.Response]]:
    answered: dict[str, httpx.Response] = {}

    def run() -> None:
        answered["response"] = call()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, answered


def test_bind_on_an_instance_being_deprovisioned_is_refused(
    broker: Harness, osb: httpx.Client, stand_in: StandInController
) -> None:
    instance_id = ready_instance(osb, stand_in, broker)
    assert osb.delete(instance_url(instance_id), params=DEPROVISION).status_code == 202
    assert instance_of(stand_in, broker, instance_id)["metadata"].get("deletionTimestamp")  # held by the finalizer
    binding_id = new_id()
    refused = osb.put(binding_url(instance_id, binding_id), params=INCOMPLETE, json=BIND)
    assert (refused.status_code, refused.json()["error"]) == (422, "ConcurrencyError")
    assert stand_in.find("binding", conventions.resource_name(binding_id)) is None

    # Marked by a deprovision that never reached its DELETE (its replica died), and the controller has since
    # moved the state on: lastOperation, which only the broker writes, still says deprovision.
    marked = ready_instance(osb, stand_in, broker)
    name = conventions.resource_name(marked)
    stand_in.status(
        "instance", broker.namespace, name, state="delete", lastOperation={"type": "deprovision", "id": "x"}
    )
    stand_in.succeed("instance", broker.namespace, name)
    binding_id = new_id()
    refused = osb.put(binding_url(marked, binding_id), params=INCOMPLETE, json=BIND)
    assert (refused.status_code, refused.json()["error"]) == (422, "ConcurrencyError")
    assert stand_in.find("binding", conventions.resource_name(binding_id)) is None
    # A repeated DELETE carries the deprovision out.
    assert osb.delete(instance_url(marked), params=DEPROVISION).status_code == 202
    assert instance_of(stand_in, broker, marked)["metadata"].get("deletionTimestamp")


def test_deprovision_while_a_binding_exists_is_refused(
    broker: Harness, osb: httpx.Client, stand_in: StandInController
) -> None:
    instance_id = ready_instance(osb, stand_in, broker)
    assert osb.put(binding_url(instance_id, new_id()), params=INCOMPLETE, json=BIND).status_code == 202
    before = instance_of(stand_in, broker, instance_id)
    refused = osb.delete(instance_url(instance_id), params=DEPROVISION)
    assert (refused.status_code, refused.json()["error"]) == (422, "BindingsExist")
    after = instance_of(stand_in, broker, instance_id)
    assert after["metadata"].get("deletionTimestamp") is None
    assert after["status"] == before["status"]


def test_a_deprovision_marking_first_makes_the_bind_withdraw(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bind read the instance; before it creates its binding, a whole deprovision runs (it counts none)."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    create = repository.create
    deprovisions: list[httpx.Response] = []

    def create_after_a_deprovision(kind: Kind, manifest: dict[str, Any]) -> Record | None:
        if kind is Kind.BINDING and manifest["metadata"]["name"] == name and not deprovisions:
            with broker.client() as other:
                deprovisions.append(other.delete(instance_url(instance_id), params=DEPROVISION))
        return create(kind, manifest)

    fence = repository.fence
    fenced: list[bool] = []

    def recorded(instance: Record, binding: Record) -> bool:
        fenced.append(fence(instance, binding))
        return fenced[-1]

    monkeypatch.setattr(repository, "create", create_after_a_deprovision)
    monkeypatch.setattr(repository, "fence", recorded)
    refused = osb.put(binding_url(instance_id, binding_id), params=INCOMPLETE, json=BIND)
    assert deprovisions[0].status_code == 202, deprovisions[0].text
    assert (refused.status_code, refused.json()["error"]) == (422, "ConcurrencyError")
    assert fenced == [False]
    withdrawn = stand_in.get("binding", broker.namespace, name)
    assert withdrawn is not None and withdrawn["metadata"].get("deletionTimestamp")  # the finalizer holds it
    assert not (withdrawn.get("status") or {}).get("lastOperation")  # never queued
    stand_in.release("binding", broker.namespace, name)
    wait_for(lambda: stand_in.get("binding", broker.namespace, name) is None, what="the withdrawn binding to go")


def test_a_bind_fencing_between_count_and_mark_makes_the_deprovision_refuse(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deprovision counted no bindings; before it marks the instance, a whole bind runs."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    binding_id = new_id()
    instance_name = conventions.resource_name(instance_id)
    guarded_status = repository.guarded_status
    binds: list[httpx.Response] = []

    def mark_after_a_bind(record: Record, status: dict[str, Any]) -> Record | None:
        if record.name == instance_name and not binds:
            with broker.client() as other:
                binds.append(other.put(binding_url(instance_id, binding_id), params=INCOMPLETE, json=BIND))
        return guarded_status(record, status)

    marks: list[bool] = []

    def recorded(record: Record, status: dict[str, Any]) -> Record | None:
        marked = mark_after_a_bind(record, status)
        marks.append(marked is not None)
        return marked

    monkeypatch.setattr(repository, "guarded_status", recorded)
    before = instance_of(stand_in, broker, instance_id)
    refused = osb.delete(instance_url(instance_id), params=DEPROVISION)
    assert binds[0].status_code == 202, binds[0].text
    assert (refused.status_code, refused.json()["error"]) == (422, "BindingsExist")
    assert marks == [False]  # the mark lost to the fence; counted again, the deprovision saw the binding
    after = instance_of(stand_in, broker, instance_id)
    assert after["metadata"].get("deletionTimestamp") is None
    assert after["status"] == before["status"]  # the refused deprovision wrote nothing
    binding = stand_in.get("binding", broker.namespace, conventions.resource_name(binding_id))
    assert binding is not None and not binding["metadata"].get("deletionTimestamp")
    assert after["metadata"]["annotations"][records.ANNOTATION_BIND_FENCE] == binding["metadata"]["uid"]


@pytest.mark.parametrize("annotated", [False, True], ids=["fence-on-resourceVersion", "fence-on-lastOperation"])
def test_a_tie_has_one_winner(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch, annotated: bool
) -> None:
    """Deprovision counted none and bind created its binding, both before either wrote the instance; the
    mark lands first. The bind withdraws; the deprovision waits for the binding to go, then DELETEs."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker, annotated=annotated)
    assert bool(instance_of(stand_in, broker, instance_id)["metadata"].get("annotations")) is annotated
    instance_name = conventions.resource_name(instance_id)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    created, marked = threading.Event(), threading.Event()
    create, guarded_status, fence = repository.create, repository.guarded_status, repository.fence

    def create_and_tell(kind: Kind, manifest: dict[str, Any]) -> Record | None:
        record = create(kind, manifest)
        if kind is Kind.BINDING and manifest["metadata"]["name"] == name:
            created.set()
        return record

    def mark_once_created(record: Record, status: dict[str, Any]) -> Record | None:
        if record.name == instance_name:
            assert created.wait(10)
            try:
                return guarded_status(record, status)
            finally:
                marked.set()
        return guarded_status(record, status)

    fenced: list[bool] = []

    def fence_once_marked(instance: Record, binding: Record) -> bool:
        if binding.name != name:
            return fence(instance, binding)
        assert marked.wait(10)
        fenced.append(fence(instance, binding))
        return fenced[-1]

    monkeypatch.setattr(repository, "create", create_and_tell)
    monkeypatch.setattr(repository, "guarded_status", mark_once_created)
    monkeypatch.setattr(repository, "fence", fence_once_marked)

    with broker.client() as other:
        deprovision, deprovision_answer = in_thread(lambda: osb.delete(instance_url(instance_id), params=DEPROVISION))
        bind, bind_answer = in_thread(
            lambda: other.put(binding_url(instance_id, binding_id), params=INCOMPLETE, json=BIND)
        )
        bind.join(20)
        refused = bind_answer["response"]
        assert (refused.status_code, refused.json()["error"]) == (422, "ConcurrencyError")
        assert fenced == [False]  # the fence failed once; the re-read showed the mark
        withdrawn = stand_in.get("binding", broker.namespace, name)
        assert withdrawn is not None and withdrawn["metadata"].get("deletionTimestamp")
        # The deprovision holds its DELETE while the withdrawn binding exists (the controller would otherwise
        # find the instance deleted with a binding and report the deprovision failed).
        assert deprovision.is_alive()
        assert not instance_of(stand_in, broker, instance_id)["metadata"].get("deletionTimestamp")
        stand_in.release("binding", broker.namespace, name)
        deprovision.join(20)
    assert deprovision_answer["response"].status_code == 202, deprovision_answer["response"].text
    assert instance_of(stand_in, broker, instance_id)["metadata"].get("deletionTimestamp")
    assert stand_in.get("binding", broker.namespace, name) is None


@pytest.mark.parametrize("withdrawn", [False, True], ids=["recorded", "withdrawn"])
def test_a_repeated_bind_waits_for_the_first_to_pass_its_fence(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch, withdrawn: bool
) -> None:
    """An identical bind arriving while the first one's binding exists but is not past its fence waits: 202
    with the same operation once the first is recorded; 422 ConcurrencyError if it is withdrawn."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    go = threading.Event()
    fence = repository.fence

    def held_fence(instance: Record, binding: Record) -> bool:
        if binding.name == name:
            assert go.wait(10)
            if withdrawn:  # a deprovision marks the instance at this moment
                mark = {"type": "deprovision", "id": "op-deprovision"}
                stand_in.status("instance", broker.namespace, instance.name, state="delete", lastOperation=mark)
        return fence(instance, binding)

    monkeypatch.setattr(repository, "fence", held_fence)
    url = binding_url(instance_id, binding_id)
    with broker.client() as other:
        first, first_answer = in_thread(lambda: osb.put(url, params=INCOMPLETE, json=BIND))
        wait_for(lambda: stand_in.get("binding", broker.namespace, name), what="the first bind's binding")
        second, second_answer = in_thread(lambda: other.put(url, params=INCOMPLETE, json=BIND))
        second.join(0.5)
        assert second.is_alive()  # waiting for the first to settle, not answering from a binding in limbo
        go.set()
        first.join(20)
        second.join(20)
    one, two = first_answer["response"], second_answer["response"]
    if withdrawn:
        assert (one.status_code, one.json()["error"]) == (422, "ConcurrencyError")
        assert (two.status_code, two.json()["error"]) == (422, "ConcurrencyError")
        stand_in.release("binding", broker.namespace, name)
    else:
        assert (one.status_code, two.status_code) == (202, 202), (one.text, two.text)
        assert one.json()["operation"] == two.json()["operation"]


def test_a_deprovision_waits_for_a_binding_not_yet_recorded(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deprovision that counts a binding whose bind is not past its fence waits for that bind: it is
    recorded, so the deprovision is refused (one winner, not two refusals)."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    go = threading.Event()
    fence = repository.fence

    def held_fence(instance: Record, binding: Record) -> bool:
        if binding.name == name:
            assert go.wait(10)
        return fence(instance, binding)

    monkeypatch.setattr(repository, "fence", held_fence)
    with broker.client() as other:
        bind, bind_answer = in_thread(
            lambda: osb.put(binding_url(instance_id, binding_id), params=INCOMPLETE, json=BIND)
        )
        wait_for(lambda: stand_in.get("binding", broker.namespace, name), what="the bind's binding")
        deprovision, deprovision_answer = in_thread(lambda: other.delete(instance_url(instance_id), params=DEPROVISION))
        deprovision.join(0.5)
        assert deprovision.is_alive()
        go.set()
        bind.join(20)
        deprovision.join(20)
    assert bind_answer["response"].status_code == 202, bind_answer["response"].text
    refused = deprovision_answer["response"]
    assert (refused.status_code, refused.json()["error"]) == (422, "BindingsExist")
    assert not instance_of(stand_in, broker, instance_id)["metadata"].get("deletionTimestamp")
