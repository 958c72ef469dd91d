"""Catalog trust (issue 24 A), table-tested without a cluster: only the trusted namespaces' SFServices and
SFPlans enter the controller's catalog; an id two trusted objects declare is served by neither; the entry
reconciler reports both (DuplicateId) and says of untrusted ones where catalog entries live (UntrustedNamespace).
The same attacks through the real API server, as a tenant: tests/tenancy/test_catalog.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from opbroker.api.conventions import FINALIZER, catalog_id, catalog_namespaces
from opbroker.controller.catalog.catalog import Catalog
from opbroker.controller.catalog.catalog_entries import PlanEntryReconciler, ServiceEntryReconciler
from opbroker.controller.catalog.core import catalog_status
from opbroker.controller.catalog.core.entry_plan import EntryFacts, NoteWarned
from opbroker.controller.core import actions as a
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import EntryView
from opbroker.controller.kinds import PLANS, SERVICES
from opbroker.controller.runtime.clock import FAKE_EPOCH as NOW
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.outcomes import DONE
from opbroker.controller.runtime.runner import Runtime
from opbroker.controller.settings import ControllerSettings
from tests.controller.test_reconcile_instances_bindings import NS, PLAN_ID, RENDERER, SERVICE_ID, World, plan_body
from tests.fake_kube import FakeKube

CONTROL = "opbroker"


def moved(body: dict[str, Any], namespace: str, name: str | None = None, **spec: Any) -> dict[str, Any]:
    """A copy of ``body`` as another object: in ``namespace``, called ``name``, its spec changed by ``spec``."""
    copied = copy.deepcopy(body)
    copied["metadata"] = {**copied["metadata"], "namespace": namespace, "name": name or copied["metadata"]["name"]}
    copied["spec"] = {**copied["spec"], **spec}
    return copied


def service_body(namespace: str = CONTROL, name: str = "svc", service_id: str = SERVICE_ID) -> dict[str, Any]:
    return {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"name": name, "id": service_id, "description": "a service", "bindable": True},
    }


# -- the trusted namespaces -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configured", "trusted"),
    [
        ((), ("opbroker",)),
        (("platform",), ("platform",)),
        (("platform", "opbroker", "platform", ""), ("platform", "opbroker")),
    ],
    ids=["default: the control-plane namespace", "a list replaces it", "deduplicated, blanks dropped"],
)
def test_trusted_namespaces(configured: tuple[str, ...], trusted: tuple[str, ...]) -> None:
    assert catalog_namespaces("opbroker", configured) == trusted
    assert ControllerSettings(catalog_namespaces=configured).trusted_namespaces == trusted


def test_catalog_id_is_spec_id_else_name() -> None:
    assert catalog_id({"metadata": {"name": "n"}, "spec": {"id": "i"}}) == "i"
    assert catalog_id({"metadata": {"name": "n"}, "spec": {}}) == "n"
    assert catalog_id({"metadata": {"name": "n"}}) == "n"


# -- the catalog ------------------------------------------------------------------------------------------------


def test_an_untrusted_plan_never_enters_nor_removes_the_real_one() -> None:
    catalog = Catalog()
    real = plan_body()
    catalog.upsert_plan(real)
    impostor = moved(real, "tenant", "impostor", description="evil")

    catalog.upsert_plan(impostor)
    entry = catalog.plan(PLAN_ID)
    assert entry is not None and entry.body is real and entry.model is not None
    assert catalog.plan_holders(PLAN_ID) == [(CONTROL, "plan")]
    assert not catalog.trusts(impostor) and catalog.trusts(real)

    catalog.remove_plan(impostor)
    assert catalog.plan(PLAN_ID) is not None and catalog.plan(PLAN_ID).body is real  # type: ignore[union-attr]
    assert catalog.seed_plan(moved(real, "tenant", "other")) is False
    assert catalog.plan_holders(PLAN_ID) == [(CONTROL, "plan")]


def test_an_untrusted_service_never_enters() -> None:
    catalog = Catalog()
    catalog.upsert_service(service_body("tenant"))
    assert catalog.service(SERVICE_ID) is None


def test_two_trusted_plans_with_one_id_are_both_refused_until_one_goes() -> None:
    catalog = Catalog(("opbroker", "platform"))
    first = plan_body()
    second = moved(first, "platform", "copy")
    catalog.upsert_plan(first)
    assert catalog.plan(PLAN_ID) is not None and catalog.plan(PLAN_ID).model is not None  # type: ignore[union-attr]

    catalog.upsert_plan(second)
    entry = catalog.plan(PLAN_ID)
    assert entry is not None and entry.model is None
    assert entry.duplicates == ("opbroker/plan", "platform/copy")
    assert entry.problem is not None and "opbroker/plan" in entry.problem and "platform/copy" in entry.problem
    assert list(catalog.plans()) == []
    assert len(catalog.plan_views(PLAN_ID)) == 2

    catalog.remove_plan(first)  # the one that stays serves again, whichever was first
    entry = catalog.plan(PLAN_ID)
    assert entry is not None and entry.model is not None and entry.body is second
    assert [e.body for e in catalog.plans()] == [second]


def test_a_plan_changing_its_id_leaves_the_old_id() -> None:
    catalog = Catalog()
    body = plan_body()
    catalog.upsert_plan(body)
    catalog.upsert_plan(moved(body, CONTROL, id="plan-2"))
    assert catalog.plan(PLAN_ID) is None
    assert catalog.plan("plan-2") is not None
    assert catalog.plan_id_of(body) == "plan-2"


def test_a_plan_of_a_duplicated_service_is_not_served() -> None:
    catalog = Catalog()
    catalog.upsert_plan(plan_body())
    catalog.upsert_service(service_body(name="svc"))
    assert catalog.plan(PLAN_ID).model is not None  # type: ignore[union-attr]
    catalog.upsert_service(service_body(name="svc-copy"))
    service = catalog.service(SERVICE_ID)
    assert service is not None and service.model is None and service.duplicates == ("opbroker/svc", "opbroker/svc-copy")
    plan = catalog.plan(PLAN_ID)
    assert plan is not None and plan.model is None and "SFService" in (plan.problem or "")
    assert catalog.plan_ids_of_service(SERVICE_ID) == [PLAN_ID]
    catalog.remove_service(service_body(name="svc-copy"))
    assert catalog.plan(PLAN_ID).model is not None  # type: ignore[union-attr]


def test_seeding_never_overwrites_what_a_watch_delivered() -> None:
    catalog = Catalog()
    newer = moved(plan_body(), CONTROL, description="newer")
    catalog.upsert_plan(newer)
    assert catalog.seed_plan(plan_body()) is False
    assert catalog.plan(PLAN_ID).body is newer  # type: ignore[union-attr]
    assert catalog.seed_service(service_body()) is True
    assert catalog.seed_service(service_body()) is False


# -- instances of a duplicated id --------------------------------------------------------------------------------


def test_an_instance_of_a_duplicated_plan_fails_naming_both_and_applies_nothing() -> None:
    world = World()
    world.catalog.upsert_plan(plan_body())
    world.catalog.upsert_plan(moved(plan_body(), CONTROL, "copy"))
    world.instance(status={"state": "in_queue"})
    assert world.reconcile() == DONE
    status = world.status()
    assert status["state"] == "failed"
    assert "opbroker/copy" in status["error"] and "opbroker/plan" in status["error"], status["error"]
    assert world.configmap("db") is None


def test_an_impostor_plan_changes_nothing_an_instance_renders() -> None:
    world = World()
    world.catalog.upsert_plan(plan_body())
    impostor = moved(plan_body(), NS, "impostor")
    impostor["spec"]["templates"] = [{"action": "provision", "type": "jinja2", "content": "kind: Secret"}]
    world.catalog.upsert_plan(impostor)  # as the watch would deliver it: it must not count
    world.instance(status={"state": "in_queue"})
    world.reconcile()
    assert world.status()["state"] == "in progress"
    assert world.configmap("db") is not None  # the real plan's template, not the impostor's


# -- the entry reconcilers ----------------------------------------------------------------------------------------


class Entries:
    def __init__(self, *trusted: str) -> None:
        self.kube = FakeKube()
        self.catalog = Catalog(trusted or (CONTROL,))
        self.runtime = Runtime(workers=1)
        self.runtime.register(PlanEntryReconciler(self.kube, RENDERER, self.catalog))  # type: ignore[arg-type]
        self.runtime.register(ServiceEntryReconciler(self.kube, RENDERER, self.catalog))  # type: ignore[arg-type]

    def add(self, body: dict[str, Any]) -> dict[str, Any]:
        created = self.kube.create(body)
        assert created is not None
        (self.catalog.upsert_plan if body["kind"] == "SFPlan" else self.catalog.upsert_service)(created)
        return created

    def reconcile(self, kind: str, namespace: str, name: str) -> None:
        assert self.runtime.reconcile_now(Key(kind, namespace, name)) == DONE

    def ready(self, kind: str, namespace: str, name: str) -> tuple[str, str, str] | None:
        found = self.kube.custom_object(PLANS if kind == "plan" else SERVICES, namespace, name)
        assert found is not None
        conditions = (found.get("status") or {}).get("conditions") or []
        return next(((c["status"], c["reason"], c["message"]) for c in conditions if c["type"] == "Ready"), None)


def test_duplicate_plans_are_both_reported_and_the_survivor_is_accepted_again() -> None:
    entries = Entries()
    entries.add(plan_body(held=False))
    entries.add(moved(plan_body(held=False), CONTROL, "copy"))
    for name, other in (("plan", "opbroker/copy"), ("copy", "opbroker/plan")):
        entries.reconcile("plan", CONTROL, name)
        ready = entries.ready("plan", CONTROL, name)
        assert ready is not None and ready[:2] == ("False", Reason.DUPLICATE_ID.value)
        assert other in ready[2], ready

    gone = entries.kube.custom_object(PLANS, CONTROL, "copy")
    entries.kube.delete_custom(PLANS, CONTROL, "copy")
    entries.catalog.remove_plan(gone)  # type: ignore[arg-type]
    entries.reconcile("plan", CONTROL, "plan")
    assert entries.ready("plan", CONTROL, "plan")[:2] == ("True", Reason.ACCEPTED.value)  # type: ignore[index]


def test_duplicate_services_are_both_reported() -> None:
    entries = Entries()
    entries.add(service_body(name="a"))
    entries.add(service_body(name="b"))
    entries.reconcile("service", CONTROL, "a")
    ready = entries.ready("service", CONTROL, "a")
    assert ready is not None and ready[:2] == ("False", Reason.DUPLICATE_ID.value) and "opbroker/b" in ready[2]


def test_an_untrusted_plan_says_where_plans_live_once_per_generation() -> None:
    entries = Entries()
    entries.add(moved(plan_body(held=False), "tenant", "impostor"))
    entries.reconcile("plan", "tenant", "impostor")
    entries.reconcile("plan", "tenant", "impostor")
    assert [(e["reason"], e["type"]) for e in entries.kube.events] == [(Reason.UNTRUSTED_NAMESPACE.value, "Warning")]
    message = entries.kube.events[0]["message"]
    assert "Apply it in 'opbroker'" in message and "--catalog-namespace" in message, message
    ready = entries.ready("plan", "tenant", "impostor")
    assert ready is not None and ready[:2] == ("False", Reason.UNTRUSTED_NAMESPACE.value) and ready[2] == message
    verbs = [c.verb for c in entries.kube.calls]
    assert verbs.count("event") == 1 and len(verbs) == 3, verbs  # create, the status once, the event once

    entries.kube.patch_custom(PLANS, "tenant", "impostor", {"spec": {"description": "again"}})
    entries.reconcile("plan", "tenant", "impostor")
    assert len(entries.kube.events) == 2  # a new generation: warned again


def test_an_untrusted_service_gets_a_warning() -> None:
    entries = Entries()
    entries.add(service_body("tenant"))
    entries.reconcile("service", "tenant", "svc")
    assert [e["reason"] for e in entries.kube.events] == [Reason.UNTRUSTED_NAMESPACE.value]


def facts(body: dict[str, Any], *, trusted: bool = True, warned: bool = False, users: int = 0) -> EntryFacts:
    verdict = (
        catalog_status.plan_verdict(None)
        if trusted
        else catalog_status.untrusted_verdict("plan", body["metadata"]["namespace"], ("opbroker",))
    )
    return EntryFacts(
        Key.of("plan", body), EntryView.of(body), verdict, users=users, trusted=trusted, warned=warned, now=NOW
    )


DELETING_HELD = moved(plan_body(deleting=True), "tenant")
UNTRUSTED = catalog_status.untrusted_verdict("plan", "tenant", ("opbroker",))
WARNED = [a.Event(UNTRUSTED.reason.value, UNTRUSTED.message, warning=True), NoteWarned(("", None))]


def _said(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` whose status already says it is untrusted (as the controller's first write left it)."""
    patch = catalog_status.status_patch(EntryView.of(body), UNTRUSTED, NOW)
    assert patch is not None
    return {**body, "status": patch}


@pytest.mark.parametrize(
    ("given", "wanted"),
    [
        (facts(_said(moved(plan_body(held=False), "tenant")), trusted=False), WARNED),
        (facts(_said(moved(plan_body(held=False), "tenant")), trusted=False, warned=True), []),
        (facts(_said(moved(plan_body(), "tenant")), trusted=False, users=3), WARNED),  # never held for its "users"
        (facts(DELETING_HELD, trusted=False, warned=True), [a.EnsureFinalizer(present=False)]),  # ours: let it go
    ],
    ids=["untrusted: warned", "untrusted: warned already", "untrusted: never held", "untrusted: released"],
)
def test_entry_plan(given: EntryFacts, wanted: list[Any]) -> None:
    assert list(PlanEntryReconciler.plan(given)) == wanted


def test_a_trusted_entry_gets_its_status_written() -> None:
    (write,) = PlanEntryReconciler.plan(facts(plan_body(held=False)))
    assert isinstance(write, a.WriteStatus) and write.guarded and write.event is None
    assert write.patch["conditions"][-1]["reason"] == Reason.ACCEPTED.value


def test_a_deleted_duplicate_goes_at_once_while_the_other_stays() -> None:
    """Its instances are the id's, which the remaining plan serves: its deletion waits for none of them."""
    entries = Entries()
    entries.add(plan_body())  # held
    entries.add(moved(plan_body(held=False), CONTROL, "copy"))
    entries.kube.create(
        {
            "apiVersion": "osb.servicefabrik.io/v1alpha1",
            "kind": "SFServiceInstance",
            "metadata": {"name": "db", "namespace": NS, "finalizers": [FINALIZER]},
            "spec": {"instanceId": "db", "serviceId": SERVICE_ID, "planId": PLAN_ID},
        }
    )
    entries.kube.delete_custom(PLANS, CONTROL, "plan")
    deleting = entries.kube.custom_object(PLANS, CONTROL, "plan")
    assert deleting is not None
    entries.catalog.upsert_plan(deleting)
    entries.reconcile("plan", CONTROL, "plan")
    assert entries.kube.custom_object(PLANS, CONTROL, "plan") is None


def test_an_untrusted_entry_whose_status_does_not_say_so_gets_it_written_even_when_warned() -> None:
    """A tenant may overwrite the condition; it is written back (no Event: warned already at this generation)."""
    body = moved(plan_body(held=False), "tenant")
    (write,) = PlanEntryReconciler.plan(facts(body, trusted=False, warned=True))
    assert isinstance(write, a.WriteStatus) and write.event is None
    assert write.patch["conditions"][-1]["reason"] == Reason.UNTRUSTED_NAMESPACE.value


def test_a_deleted_untrusted_entry_is_not_written() -> None:
    body = moved(plan_body(deleting=True, held=False), "tenant")
    assert list(PlanEntryReconciler.plan(facts(body, trusted=False))) == []
