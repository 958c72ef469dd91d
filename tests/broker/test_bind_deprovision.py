"""A bind and a deprovision of the same instance: never both accepted (real HTTP, real API server, stand-in).

Aspects: a bind on an instance already being deprovisioned (deleted, or only marked by a deprovision that
never got to its DELETE, even after the controller moved the state on) is refused with 422
ConcurrencyError and records no binding; a deprovision while a binding exists is refused with 422
BindingsExist and leaves the instance as it was; a bind writes nothing to the instance. Then the ways the
two can interleave inside the broker (see :mod:`opbroker.broker.effects`), forced by holding one request
at a chosen step (the repository methods are wrapped): a whole deprovision between the bind's read and its
create, and the deprovision's mark between the bind's create and its second read (the bind withdraws its
binding: 422 ConcurrencyError; the deprovision waits for it to go before its DELETE); a whole bind between
the deprovision's count and its mark, and a bind reading the instance again before the mark but recording
after the recount (the deprovision undoes its mark, the status exactly as before, and answers 422
BindingsExist); the undoing racing another writer (fields changed since are kept; a mark written over by
another request is left alone). Last, an identical bind arriving while the first one's binding is not
recorded waits for it instead of answering from a binding that may be withdrawn, and so does a deprovision
counting such a binding (then refused: one winner rather than two refusals).
"""

# ruff: noqa: F811  (test functions take the imported fixtures as arguments)

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from opbroker.api import conventions
from opbroker.broker.records import Kind, Record
from opbroker.broker.repository import Repository
from tests.broker_support import (  # noqa: F401  (pytest fixtures)
    ASYNC_PLAN,
    BINDINGS,
    SERVICE,
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


def ready_instance(osb: httpx.Client, stand_in: StandInController, harness: Harness) -> str:
    """A succeeded instance."""
    instance_id = new_id()
    response = osb.put(instance_url(instance_id), params=INCOMPLETE, json=provision_body())
    assert response.status_code == 202, response.text
    stand_in.succeed("instance", harness.namespace, conventions.resource_name(instance_id))
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


def counting_lists(
    repository: Repository, monkeypatch: pytest.MonkeyPatch, instance_name: str
) -> tuple[threading.Event, threading.Event]:
    """Wrap the listing of the instance's bindings: the first list (the deprovision's count) sets the first
    event, the second (its recount after the mark) the second."""
    listed = repository.bindings_of
    counted, recounted = threading.Event(), threading.Event()
    calls: list[int] = []

    def bindings_of(instance: Record) -> list[Record]:
        found = listed(instance)
        if instance.name == instance_name:
            calls.append(len(found))
            (counted if len(calls) == 1 else recounted).set()
        return found

    monkeypatch.setattr(repository, "bindings_of", bindings_of)
    return counted, recounted


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
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # refused on its count


def test_a_bind_writes_nothing_to_the_instance(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bind's writes are its binding's create and its queued status; the instance is only read."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    before = instance_of(stand_in, broker, instance_id)
    writes: list[tuple[str, str]] = []
    send = repository.custom.request

    def spy(method: str, path: str, **options: Any) -> Any:  # every request of the repository goes through here
        if method != "GET":
            writes.append((method, path))
        return send(method, path, **options)

    monkeypatch.setattr(repository.custom, "request", spy)
    binding_id = new_id()
    response = osb.put(binding_url(instance_id, binding_id), params=INCOMPLETE, json=BIND)
    assert response.status_code == 202, response.text
    name = conventions.resource_name(binding_id)
    bindings = f"/namespaces/{before['metadata']['namespace']}/{BINDINGS}"
    assert [(method, path.split("/v1alpha1", 1)[1]) for method, path in writes] == [
        ("POST", bindings),
        ("PATCH", f"{bindings}/{name}/status"),
    ]
    after = instance_of(stand_in, broker, instance_id)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_a_whole_deprovision_between_the_binds_read_and_create_makes_the_bind_withdraw(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bind read the instance; before it creates its binding, a whole deprovision runs (it counts none)."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    create, get = repository.create, repository.get
    deprovisions: list[httpx.Response] = []
    reread: list[Record | None] = []

    def create_after_a_deprovision(kind: Kind, manifest: dict[str, Any]) -> Record | None:
        if kind is Kind.BINDING and manifest["metadata"]["name"] == name and not deprovisions:
            with broker.client() as other:
                deprovisions.append(other.delete(instance_url(instance_id), params=DEPROVISION))
            created = create(kind, manifest)
            monkeypatch.setattr(repository, "get", read_again)
            return created
        return create(kind, manifest)

    def read_again(kind: Kind, namespace: str, instance_name: str) -> Record | None:
        reread.append(get(kind, namespace, instance_name))
        return reread[-1]

    monkeypatch.setattr(repository, "create", create_after_a_deprovision)
    refused = osb.put(binding_url(instance_id, binding_id), params=INCOMPLETE, json=BIND)
    assert deprovisions[0].status_code == 202, deprovisions[0].text
    assert (refused.status_code, refused.json()["error"]) == (422, "ConcurrencyError")
    assert reread[0] is not None and reread[0].deleting  # the second read found the instance deleted
    withdrawn = stand_in.get("binding", broker.namespace, name)
    assert withdrawn is not None and withdrawn["metadata"].get("deletionTimestamp")  # the finalizer holds it
    assert not (withdrawn.get("status") or {}).get("lastOperation")  # never queued
    stand_in.release("binding", broker.namespace, name)
    wait_for(lambda: stand_in.get("binding", broker.namespace, name) is None, what="the withdrawn binding to go")


def test_a_mark_between_the_binds_create_and_its_second_read_makes_the_bind_withdraw(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deprovision counted none, then bind created its binding, then the mark, then the bind's second read:
    the bind withdraws; the deprovision, seeing the binding at its recount, waits for it to settle
    (withdrawn), then for it to go, then DELETEs."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    instance_name = conventions.resource_name(instance_id)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    counted, recounted = counting_lists(repository, monkeypatch, instance_name)
    created, marked = threading.Event(), threading.Event()
    create, guarded_status = repository.create, repository.guarded_status

    def create_once_counted(kind: Kind, manifest: dict[str, Any]) -> Record | None:
        if kind is not Kind.BINDING or manifest["metadata"]["name"] != name:
            return create(kind, manifest)
        assert counted.wait(10)
        record = create(kind, manifest)
        created.set()
        assert marked.wait(10)  # the second read comes after the mark
        return record

    marks: list[Record | None] = []

    def mark_once_created(record: Record, status: dict[str, Any]) -> Record | None:
        if record.name != instance_name:
            return guarded_status(record, status)
        assert created.wait(10)
        marks.append(guarded_status(record, status))
        marked.set()
        return marks[-1]

    monkeypatch.setattr(repository, "create", create_once_counted)
    monkeypatch.setattr(repository, "guarded_status", mark_once_created)

    with broker.client() as other:
        deprovision, deprovision_answer = in_thread(lambda: osb.delete(instance_url(instance_id), params=DEPROVISION))
        bind, bind_answer = in_thread(
            lambda: other.put(binding_url(instance_id, binding_id), params=INCOMPLETE, json=BIND)
        )
        bind.join(20)
        refused = bind_answer["response"]
        assert (refused.status_code, refused.json()["error"]) == (422, "ConcurrencyError")
        assert len(marks) == 1 and marks[0] is not None  # marked once, never undone
        withdrawn = stand_in.get("binding", broker.namespace, name)
        assert withdrawn is not None and withdrawn["metadata"].get("deletionTimestamp")
        assert not (withdrawn.get("status") or {}).get("lastOperation")
        # The deprovision holds its DELETE while the withdrawn binding exists (the controller would otherwise
        # find the instance deleted with a binding and report the deprovision failed).
        wait_for(recounted.is_set, what="the deprovision's recount")
        assert deprovision.is_alive()
        assert not instance_of(stand_in, broker, instance_id)["metadata"].get("deletionTimestamp")
        stand_in.release("binding", broker.namespace, name)
        deprovision.join(20)
    assert deprovision_answer["response"].status_code == 202, deprovision_answer["response"].text
    assert instance_of(stand_in, broker, instance_id)["metadata"].get("deletionTimestamp")
    assert stand_in.get("binding", broker.namespace, name) is None


def test_a_whole_bind_between_count_and_mark_makes_the_deprovision_undo_its_mark(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deprovision counted no bindings; before it marks the instance, a whole bind runs. The mark succeeds (the
    bind did not touch the instance); the recount finds the recorded binding: the mark is undone, the status
    exactly as before, and the deprovision refused."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    binding_id = new_id()
    instance_name = conventions.resource_name(instance_id)
    guarded_status = repository.guarded_status
    binds: list[httpx.Response] = []
    writes: list[bool] = []

    def mark_after_a_bind(record: Record, status: dict[str, Any]) -> Record | None:
        if record.name == instance_name and not binds:
            with broker.client() as other:
                binds.append(other.put(binding_url(instance_id, binding_id), params=INCOMPLETE, json=BIND))
        written = guarded_status(record, status)
        if record.name == instance_name:
            writes.append(written is not None)
        return written

    monkeypatch.setattr(repository, "guarded_status", mark_after_a_bind)
    before = instance_of(stand_in, broker, instance_id)
    refused = osb.delete(instance_url(instance_id), params=DEPROVISION)
    assert binds[0].status_code == 202, binds[0].text
    assert (refused.status_code, refused.json()["error"]) == (422, "BindingsExist")
    assert writes == [True, True]  # the mark, then its undoing
    after = instance_of(stand_in, broker, instance_id)
    assert after["metadata"].get("deletionTimestamp") is None
    assert after["status"] == before["status"]
    assert after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
    binding = stand_in.get("binding", broker.namespace, conventions.resource_name(binding_id))
    assert binding is not None and not binding["metadata"].get("deletionTimestamp")
    assert binding["status"]["lastOperation"]["type"] == "bind"
    # The instance is bindable again.
    assert osb.put(binding_url(instance_id, new_id()), params=INCOMPLETE, json=BIND).status_code == 202


def test_a_bind_reading_again_before_the_mark_makes_the_deprovision_wait_and_undo_its_mark(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deprovision counted none; bind created its binding and read the instance (not marked yet); then the
    mark, and the recount finds the binding not yet recorded: the deprovision waits for it, and once the bind
    records it, undoes its mark and refuses. The bind is accepted."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    instance_name = conventions.resource_name(instance_id)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    counted, recounted = counting_lists(repository, monkeypatch, instance_name)
    reread = threading.Event()
    create, guarded_status, queue_status = repository.create, repository.guarded_status, repository.queue_status

    def create_once_counted(kind: Kind, manifest: dict[str, Any]) -> Record | None:
        if kind is Kind.BINDING and manifest["metadata"]["name"] == name:
            assert counted.wait(10)
        return create(kind, manifest)

    def queue_once_recounted(record: Record, status: dict[str, Any]) -> Record:
        if record.name == name:
            reread.set()  # the bind read the instance again, and found it bindable
            assert recounted.wait(10)
        return queue_status(record, status)

    def mark_once_reread(record: Record, status: dict[str, Any]) -> Record | None:
        if record.name == instance_name and not reread.is_set():
            assert reread.wait(10)
        return guarded_status(record, status)

    monkeypatch.setattr(repository, "create", create_once_counted)
    monkeypatch.setattr(repository, "queue_status", queue_once_recounted)
    monkeypatch.setattr(repository, "guarded_status", mark_once_reread)
    before = instance_of(stand_in, broker, instance_id)
    with broker.client() as other:
        deprovision, deprovision_answer = in_thread(lambda: osb.delete(instance_url(instance_id), params=DEPROVISION))
        bind, bind_answer = in_thread(
            lambda: other.put(binding_url(instance_id, binding_id), params=INCOMPLETE, json=BIND)
        )
        bind.join(20)
        deprovision.join(20)
    assert bind_answer["response"].status_code == 202, bind_answer["response"].text
    refused = deprovision_answer["response"]
    assert (refused.status_code, refused.json()["error"]) == (422, "BindingsExist")
    after = instance_of(stand_in, broker, instance_id)
    assert after["metadata"].get("deletionTimestamp") is None
    assert after["status"] == before["status"]
    binding = stand_in.get("binding", broker.namespace, name)
    assert binding is not None and binding["status"]["lastOperation"]["type"] == "bind"


@pytest.mark.parametrize("meanwhile", ["controller", "deprovision"])
def test_undoing_a_mark_after_another_write(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch, meanwhile: str
) -> None:
    """The instance changed between the mark and its undoing, so the guarded undo fails and the instance is
    read again. A controller status write: the mark is still this request's, so it is undone, keeping what
    the controller wrote. Another deprovision's mark over it: not this request's to undo; left alone."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    instance_name = conventions.resource_name(instance_id)
    guarded_status = repository.guarded_status
    binds: list[httpx.Response] = []
    writes: list[bool] = []
    other_mark = {"type": "deprovision", "id": "op-other", "startedAt": "2026-01-01T00:00:00.000001Z"}

    def mark_after_a_bind(record: Record, status: dict[str, Any]) -> Record | None:
        if record.name != instance_name:
            return guarded_status(record, status)
        if not writes:  # the mark: a whole bind first
            with broker.client() as other:
                binds.append(other.put(binding_url(instance_id, new_id()), params=INCOMPLETE, json=BIND))
        elif len(writes) == 1 and meanwhile == "controller":  # the undo: another write first
            stand_in.status("instance", broker.namespace, instance_name, description="seen by the controller")
        elif len(writes) == 1:
            stand_in.status("instance", broker.namespace, instance_name, lastOperation=other_mark)
        written = guarded_status(record, status)
        writes.append(written is not None)
        return written

    monkeypatch.setattr(repository, "guarded_status", mark_after_a_bind)
    before = instance_of(stand_in, broker, instance_id)
    refused = osb.delete(instance_url(instance_id), params=DEPROVISION)
    assert binds[0].status_code == 202, binds[0].text
    assert (refused.status_code, refused.json()["error"]) == (422, "BindingsExist")
    after = instance_of(stand_in, broker, instance_id)["status"]
    if meanwhile == "controller":
        assert writes == [True, False, True]  # the mark, the undo lost to the write, the undo read again
        assert after == {**before["status"], "description": "seen by the controller"}
    else:
        assert writes == [True, False]  # then the mark read again was not this request's any more
        assert (after["state"], after["lastOperation"]) == ("delete", other_mark)


@pytest.mark.parametrize("withdrawn", [False, True], ids=["recorded", "withdrawn"])
def test_a_repeated_bind_waits_for_the_first_to_be_recorded(
    broker: Harness, osb: httpx.Client, stand_in: StandInController, monkeypatch: pytest.MonkeyPatch, withdrawn: bool
) -> None:
    """An identical bind arriving while the first one's binding exists but is not recorded waits: 202 with the
    same operation once the first is recorded; 422 ConcurrencyError if it is withdrawn."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    instance_name = conventions.resource_name(instance_id)
    go = threading.Event()
    create = repository.create

    def held_create(kind: Kind, manifest: dict[str, Any]) -> Record | None:
        record = create(kind, manifest)
        if kind is Kind.BINDING and manifest["metadata"]["name"] == name:
            assert go.wait(10)
            if withdrawn:  # a deprovision marks the instance at this moment
                mark = {"type": "deprovision", "id": "op-deprovision"}
                stand_in.status("instance", broker.namespace, instance_name, state="delete", lastOperation=mark)
        return record

    monkeypatch.setattr(repository, "create", held_create)
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
    """A deprovision that counts a binding not yet recorded waits for its bind: it is recorded, so the
    deprovision is refused (one winner, not two refusals), without having written the instance."""
    repository = repository_of(broker)
    instance_id = ready_instance(osb, stand_in, broker)
    binding_id = new_id()
    name = conventions.resource_name(binding_id)
    go = threading.Event()
    create = repository.create

    def held_create(kind: Kind, manifest: dict[str, Any]) -> Record | None:
        record = create(kind, manifest)
        if kind is Kind.BINDING and manifest["metadata"]["name"] == name:
            assert go.wait(10)
        return record

    monkeypatch.setattr(repository, "create", held_create)
    before = instance_of(stand_in, broker, instance_id)
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
    after = instance_of(stand_in, broker, instance_id)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
