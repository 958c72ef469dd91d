"""Instance and binding reconcilers, table-tested without a cluster.

Two tables: the pure ``plan`` of each reconciler over facts, and whole reconciles through
``Runtime.reconcile_now`` against the in-memory fake of the controller's Kubernetes wrapper
(tests/fake_kube.py, itself checked against a real API server in tests/test_fake_kube.py). The plan below
provisions a ConfigMap and reads its ``data.phase`` back in the status template: the test plays the operator
by patching that field.
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import REGISTRY

from opbroker.api.conventions import (
    ANNOTATION_OWNER_UID,
    ANNOTATION_PAUSED,
    CREDENTIALS_KEY,
    FINALIZER,
    LABEL_MANAGED_BY,
    PAUSED,
)
from opbroker.api.meta import ResourceRef
from opbroker.controller.catalog.catalog import Catalog, PlanEntry
from opbroker.controller.catalog.catalog_entries import PlanEntryReconciler
from opbroker.controller.core import decisions
from opbroker.controller.core.decisions import Step
from opbroker.controller.core.digests import DigestKey
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import BindingView, InstanceView
from opbroker.controller.kinds import BINDINGS, INSTANCES, PLANS
from opbroker.controller.osb import digest_key
from opbroker.controller.osb.bindings import BindingFacts, BindingReconciler
from opbroker.controller.osb.instances import InstanceFacts, InstanceReconciler
from opbroker.controller.osb.reconciling import Deps
from opbroker.controller.runtime.clock import FAKE_EPOCH as NOW
from opbroker.controller.runtime.executor import OwnWrites
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.outcomes import DONE, Outcome, TemporaryError
from opbroker.controller.runtime.policies import Policies
from opbroker.controller.runtime.runner import Runtime
from opbroker.controller.runtime.sources import SourceIndex
from opbroker.controller.settings import ControllerSettings
from opbroker.rendering import Renderer
from tests.fake_kube import FakeKube

#: The policy table without jitter: a conflict's retry comes after exactly the table's base.
EXACT = Policies().unjittered()
NS = "team"
SERVICE_ID = "svc-1"
PLAN_ID = "plan-1"
POLL = 3.0
THRESHOLD = 3

SOURCES = """\
config:
  apiVersion: v1
  kind: ConfigMap
  name: {{ instance.metadata.name }}
  namespace: {{ instance.metadata.namespace }}
"""
STATUS = """\
{%- set phase = config.data.phase | default("") %}
provision:
  state: {{ {"Ready": "succeeded", "Failed": "failed"}.get(phase, "in progress") }}
  description: {{ config.data.message | default("") }}
  error: {{ config.data.message if phase == "Failed" else "" }}
  dashboardUrl: https://dash.example.com/{{ instance.metadata.name }}
{%- if binding %}
bind:
  state: {{ "succeeded" if phase == "Ready" else "in progress" }}
{%- if phase == "Ready" %}
  response:
    credentials:
      user: {{ binding.metadata.name }}
{%- endif %}
{%- endif %}
deprovision:
  state: {{ "in progress" if config else "succeeded" }}
"""
PROVISION = """\
{% if parameter("/explode") %}{{ 1 // 0 }}{% endif %}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ instance.metadata.name }}
data:
  size: "{{ parameter("/size", "1") }}"
"""
BIND = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ binding.metadata.name }}-user
data:
  user: {{ binding.metadata.name }}
"""

SERVICE = {
    "apiVersion": "osb.servicefabrik.io/v1alpha1",
    "kind": "SFService",
    "metadata": {"name": "svc", "namespace": "opbroker"},
    "spec": {"name": "svc", "id": SERVICE_ID, "description": "a service", "bindable": True},
}


def plan_body(
    *, status: bool = True, held: bool = True, deleting: bool = False, orphan: bool = False, paused: bool = False
) -> dict[str, Any]:
    """The test plan; ``orphan``: its provision and bind templates say ``deletionPolicy: orphan``; ``paused``: the
    pause annotation on it."""
    policy = {"deletionPolicy": "orphan"} if orphan else {}
    templates = [
        {"action": "sources", "type": "jinja2", "content": SOURCES},
        {"action": "provision", "type": "jinja2", "content": PROVISION, **policy},
        {"action": "bind", "type": "jinja2", "content": BIND, **policy},
    ]
    if status:
        templates.append({"action": "status", "type": "jinja2", "content": STATUS})
    meta: dict[str, Any] = {"name": "plan", "namespace": "opbroker"}
    if paused:
        meta["annotations"] = {ANNOTATION_PAUSED: PAUSED}
    if held:
        meta["finalizers"] = [FINALIZER]  # instances use it (see catalog_entries)
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFPlan",
        "metadata": meta,
        "spec": {
            "name": "small",
            "id": PLAN_ID,
            "serviceId": SERVICE_ID,
            "description": "a plan",
            "free": True,
            "bindable": True,
            "manager": {"async": True},
            "templates": templates,
        },
    }


RENDERER = Renderer()
ENTRY = Catalog().upsert_plan(plan_body())
UNHELD = Catalog().upsert_plan(plan_body(held=False))
WITHDRAWN = Catalog().upsert_plan(plan_body(deleting=True))


def ago(seconds: float) -> str:
    return (datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the pure plans ----------------------------------------------------------------------------------------


def body(
    *,
    state: str | None = None,
    finalizer: bool = True,
    deleting: bool = False,
    generation: int = 1,
    observed: int | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x", "namespace": NS, "generation": generation, "uid": "u"}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {}
    if state is not None:
        status["state"] = state
    if observed is not None:
        status["observedGeneration"] = observed
    return {"metadata": meta, "spec": {"planId": PLAN_ID, "instanceId": "x"}, "status": status}


INVALID = PlanEntry(body=plan_body(), model=None, problem="spec.templates: broken", hash="h")
PENDING = {"resources": [], "observedGeneration": 1}
APPLIED_UPDATE = body(state="update", observed=1)
APPLIED_UPDATE["status"]["appliedPlanHash"] = "h0"

INSTANCE_PLANS = [
    # case, instance, plan entry, live bindings, pending apply, expected actions
    ("new instance gets the finalizer", body(finalizer=False), ENTRY, 0, None, (Step.ADD_FINALIZER,)),
    ("requested instance is applied", body(state="in_queue"), ENTRY, 0, None, (Step.APPLY,)),
    ("no state yet is a request", body(), ENTRY, 0, None, (Step.APPLY,)),
    ("update requested", body(state="update", observed=1), ENTRY, 0, None, (Step.APPLY,)),
    ("spec changed", body(state="succeeded", generation=2, observed=1), ENTRY, 0, None, (Step.APPLY,)),
    ("in progress with pending apply", body(state="in progress"), ENTRY, 0, PENDING, (Step.AWAIT_OUTCOME,)),
    ("in progress, applied (no record)", body(state="in progress"), ENTRY, 0, None, (Step.APPLY,)),
    ("in progress, recorded", body(state="in progress", observed=1), ENTRY, 0, None, (Step.EVALUATE,)),
    ("re-requested while pending", body(state="in_queue"), ENTRY, 0, PENDING, (Step.APPLY,)),
    ("succeeded is checked (day two)", body(state="succeeded", observed=1), ENTRY, 0, None, (Step.CHECK,)),
    ("failed needs nothing", body(state="failed", observed=1), ENTRY, 0, None, ()),
    ("deleting with bindings", body(state="succeeded", deleting=True), ENTRY, 2, None, (Step.BLOCKED,)),
    ("deleting without bindings", body(state="succeeded", deleting=True), ENTRY, 0, None, (Step.TEARDOWN,)),
    ("deleting, plan missing", body(deleting=True), None, 0, None, (Step.TEARDOWN,)),
    ("deleted, finalizer released", body(deleting=True, finalizer=False), ENTRY, 0, None, ()),
    ("plan missing", body(state="in_queue"), None, 0, None, (Step.REPORT_PLAN_PROBLEM,)),
    ("plan invalid", body(state="in_queue"), INVALID, 0, None, (Step.REPORT_PLAN_PROBLEM,)),
    ("plan missing, in progress", body(state="in progress", observed=1), None, 0, None, (Step.REPORT_PLAN_PROBLEM,)),
    ("plan missing, nothing to do", body(state="succeeded", observed=1), None, 0, None, ()),
    ("a plan not held yet: wait for its reconciler", body(state="in_queue"), UNHELD, 0, None, (Step.HOLD_PLAN,)),
    ("new instance of a withdrawn plan", body(state="in_queue"), WITHDRAWN, 0, None, (Step.REFUSE_WITHDRAWN,)),
    ("update of a withdrawn plan's instance", APPLIED_UPDATE, WITHDRAWN, 0, None, (Step.APPLY,)),
    ("deprovision of a withdrawn plan's instance", body(deleting=True), WITHDRAWN, 0, None, (Step.TEARDOWN,)),
]


@pytest.mark.parametrize(
    ("instance", "entry", "bindings", "pending", "expected"),
    [case[1:] for case in INSTANCE_PLANS],
    ids=[case[0] for case in INSTANCE_PLANS],
)
def test_instance_plan(
    instance: dict[str, Any],
    entry: PlanEntry | None,
    bindings: int,
    pending: dict[str, Any] | None,
    expected: tuple[Step, ...],
) -> None:
    facts = InstanceFacts(Key("instance", NS, "x"), InstanceView.of(instance), entry, bindings, pending, now=NOW)
    assert tuple(InstanceReconciler.steps(facts)) == expected


SUCCEEDED = body(state="succeeded", observed=1)

BINDING_PLANS = [
    # case, binding, instance, plan entry, pending apply, expected actions
    ("new binding gets the finalizer", body(finalizer=False), SUCCEEDED, ENTRY, None, (Step.ADD_FINALIZER,)),
    ("requested on a ready instance", body(state="in_queue"), SUCCEEDED, ENTRY, None, (Step.APPLY,)),
    ("instance gone", body(state="in_queue"), None, ENTRY, None, (Step.ABANDON,)),
    ("instance being deleted", body(), body(state="succeeded", deleting=True), ENTRY, None, (Step.ABANDON,)),
    ("instance failed", body(), body(state="failed", observed=1), ENTRY, None, (Step.REPORT_INSTANCE_FAILED,)),
    ("instance still provisioning", body(), body(state="in progress"), ENTRY, None, (Step.BLOCKED,)),
    ("plan missing", body(), SUCCEEDED, None, None, (Step.REPORT_PLAN_PROBLEM,)),
    ("plan invalid", body(), SUCCEEDED, INVALID, None, (Step.REPORT_PLAN_PROBLEM,)),
    ("in progress with pending apply", body(state="in progress"), SUCCEEDED, ENTRY, PENDING, (Step.AWAIT_OUTCOME,)),
    ("in progress, recorded", body(state="in progress", observed=1), SUCCEEDED, ENTRY, None, (Step.EVALUATE,)),
    (
        "bound: credentials follow their sources",
        body(state="succeeded", observed=1),
        SUCCEEDED,
        ENTRY,
        None,
        (Step.REFRESH,),
    ),
    ("bound, instance going: credentials kept", body(state="succeeded", observed=1), None, ENTRY, None, ()),
    ("bound, plan invalid: credentials kept", body(state="succeeded", observed=1), SUCCEEDED, INVALID, None, ()),
    ("unbind", body(state="succeeded", deleting=True), SUCCEEDED, ENTRY, None, (Step.TEARDOWN,)),
    ("unbind, instance gone", body(deleting=True), None, None, None, (Step.TEARDOWN,)),
    ("unbound, finalizer released", body(deleting=True, finalizer=False), None, ENTRY, None, ()),
]


@pytest.mark.parametrize(
    ("binding", "instance", "entry", "pending", "expected"),
    [case[1:] for case in BINDING_PLANS],
    ids=[case[0] for case in BINDING_PLANS],
)
def test_binding_plan(
    binding: dict[str, Any],
    instance: dict[str, Any] | None,
    entry: PlanEntry | None,
    pending: dict[str, Any] | None,
    expected: tuple[Step, ...],
) -> None:
    view = InstanceView.of(instance) if instance is not None else None
    facts = BindingFacts(Key("binding", NS, "x"), BindingView.of(binding), view, entry, pending, now=NOW)
    assert tuple(BindingReconciler.steps(facts)) == expected


# -- whole reconciles against the fake ---------------------------------------------------------------------


class Watchers:
    """Stands in for SourceWatchers: records the kinds a reconcile asked to watch (no threads)."""

    def __init__(self) -> None:
        self.kinds: set[tuple[str, str]] = set()
        self.waited: list[frozenset[tuple[str, str]]] = []
        """The kinds of every wait for a first listing."""

    def ensure(self, kinds: Iterable[tuple[str, str]]) -> None:
        self.kinds.update(kinds)

    @property
    def live(self) -> frozenset[tuple[str, str]]:
        """The kinds asked for, as if each watch were live at once."""
        return frozenset(self.kinds)

    def wait_listed(self, kinds: Iterable[tuple[str, str]], timeout: float, *, bodies: bool = False) -> bool:
        self.waited.append(frozenset(kinds))
        return set(kinds) <= self.kinds


@dataclass
class World:
    kube: FakeKube = field(default_factory=FakeKube)
    catalog: Catalog = field(default_factory=Catalog)
    settings: ControllerSettings = field(
        default_factory=lambda: ControllerSettings(status_poll_seconds=POLL, error_threshold=THRESHOLD)
    )
    watchers: Watchers = field(default_factory=Watchers)

    def __post_init__(self) -> None:
        self.catalog.upsert_service(SERVICE)
        self.runtime = Runtime(workers=1, policies=EXACT)
        memories = self.runtime.memories
        self.index = memories.keep(SourceIndex())
        self.deps = Deps(
            self.kube,  # type: ignore[arg-type]
            self.catalog,
            RENDERER,
            self.settings,
            self.index,
            self.watchers,  # type: ignore[arg-type]
            own_writes=memories.keep(OwnWrites()),
        )
        # As the controller's start: the shared digest key (a World on the same kube is a restart of this one).
        before = len(self.kube.calls)
        digest_key.load(self.deps.digest_key, self.kube, self.settings.registries_namespace)  # type: ignore[arg-type]
        del self.kube.calls[before:]  # the start's, not a reconcile's
        self.instances = InstanceReconciler(self.deps, memories)
        self.runtime.register(self.instances)
        self.runtime.register(BindingReconciler(self.deps, memories))

    # -- setting the scene ---------------------------------------------------------------------------------

    def instance(
        self,
        name: str = "db",
        *,
        finalizer: bool = True,
        parameters: dict[str, Any] | None = None,
        status: dict[str, Any] | None = None,
        plan_id: str = PLAN_ID,
    ) -> dict[str, Any]:
        self.kube.create(
            {
                "apiVersion": INSTANCES.api_version,
                "kind": "SFServiceInstance",
                "metadata": {"name": name, "namespace": NS, "finalizers": [FINALIZER] if finalizer else []},
                "spec": {
                    "instanceId": name,
                    "serviceId": SERVICE_ID,
                    "planId": plan_id,
                    "parameters": parameters or {},
                },
            }
        )
        if status is not None:
            self.kube.patch_custom_status(INSTANCES, NS, name, status)
        self.kube.calls.clear()
        return self.get("instance", name)

    def binding(self, name: str = "b", *, instance: str = "db", finalizer: bool = True) -> dict[str, Any]:
        self.kube.create(
            {
                "apiVersion": BINDINGS.api_version,
                "kind": "SFServiceBinding",
                "metadata": {"name": name, "namespace": NS, "finalizers": [FINALIZER] if finalizer else []},
                "spec": {"id": name, "instanceId": instance, "serviceId": SERVICE_ID, "planId": PLAN_ID},
            }
        )
        self.kube.calls.clear()
        return self.get("binding", name)

    def operator(self, name: str, **data: str) -> None:
        """The operator reports on the ConfigMap it was given (a merge patch of ``data``)."""
        self.kube.merge_patch(ResourceRef(api_version="v1", kind="ConfigMap", name=name, namespace=NS), {"data": data})
        self.kube.calls.clear()

    # -- looking ----------------------------------------------------------------------------------------

    def reconcile(self, kind: str = "instance", name: str = "db") -> Outcome:
        return self.runtime.reconcile_now(Key(kind, NS, name))

    def get(self, kind: str = "instance", name: str = "db") -> dict[str, Any]:
        found = self.kube.custom_object(INSTANCES if kind == "instance" else BINDINGS, NS, name)
        assert found is not None, f"{kind} {name} is gone"
        return found

    def status(self, kind: str = "instance", name: str = "db") -> dict[str, Any]:
        status: dict[str, Any] = self.get(kind, name).get("status") or {}
        return status

    def ready(self, kind: str = "instance", name: str = "db") -> tuple[str, str]:
        (ready,) = [c for c in self.status(kind, name)["conditions"] if c["type"] == "Ready"]
        return ready["status"], ready["reason"]

    def configmap(self, name: str) -> dict[str, Any] | None:
        return self.kube.object("v1", "ConfigMap", NS, name)

    def event_reasons(self) -> list[tuple[str, str]]:
        return [(e["reason"], e["type"]) for e in self.kube.events]

    def verbs(self) -> list[tuple[str, str]]:
        return [(c.verb, c.kind) for c in self.kube.calls]


@pytest.fixture
def world() -> World:
    w = World()
    w.catalog.upsert_plan(plan_body())
    return w


def test_new_instance_is_provisioned_then_reported(world: World) -> None:
    world.instance(finalizer=False, parameters={"size": "3"})
    outcome = world.reconcile()

    instance = world.get()
    assert instance["metadata"]["finalizers"] == [FINALIZER]
    assert outcome == Outcome(requeue_after=POLL)
    status = world.status()
    assert status["state"] == "in progress" and status["description"] == "applying"
    assert status["resources"] == [{"apiVersion": "v1", "kind": "ConfigMap", "name": "db", "namespace": NS}]
    assert "observedGeneration" not in status  # the apply's record waits for the outcome
    assert world.ready() == ("False", Reason.IN_PROGRESS.value)
    configmap = world.configmap("db")
    assert configmap is not None and configmap["data"] == {"size": "3"}
    assert configmap["metadata"]["ownerReferences"][0]["uid"] == instance["metadata"]["uid"]
    assert world.verbs() == [
        ("patch", "SFServiceInstance"),
        ("patch_status", "SFServiceInstance"),
        ("apply_secret", "Secret"),  # the instance's registry
        ("apply", "ConfigMap"),
    ]
    assert world.event_reasons() == []
    assert ("v1", "ConfigMap") in world.watchers.kinds
    # the watch event of the apply's own version tells nobody: this reconcile evaluated the object as written
    applied = ("v1", "ConfigMap", NS, "db")
    assert world.index.owners_of(applied, configmap["metadata"]["resourceVersion"]) == set()
    assert world.index.owners_of(applied) == {Key("instance", NS, "db")}

    world.kube.calls.clear()
    world.operator("db", phase="Ready")
    assert world.reconcile() == DONE
    status = world.status()
    assert status["state"] == "succeeded" and status["observedGeneration"] == 1
    assert status["dashboardUrl"] == "https://dash.example.com/db"
    assert world.ready() == ("True", Reason.PROVISIONED.value)
    assert world.verbs() == [("patch_status", "SFServiceInstance"), ("event", "SFServiceInstance")]  # no re-apply
    assert world.event_reasons() == [(Reason.PROVISIONED.value, "Normal")]

    world.kube.calls.clear()
    assert world.reconcile() == DONE
    assert world.kube.calls == []  # as it should be: nothing written

    # After a restart (nothing remembered), the first check waits for the listing of the kinds it reads whole.
    world.watchers.waited.clear()
    world.instances.day_two.forget(Key("instance", NS, "db"))
    assert world.reconcile() == DONE
    assert world.watchers.waited == [frozenset({("v1", "ConfigMap")})]
    world.watchers.waited.clear()
    assert world.reconcile() == DONE
    assert world.watchers.waited == []  # remembered since: the store has it


@pytest.mark.parametrize(
    ("phase", "state", "reason", "event"),
    [
        ("Ready", "succeeded", Reason.PROVISIONED, "Normal"),
        ("Failed", "failed", Reason.FAILED, "Warning"),
        ("Creating", "in progress", Reason.IN_PROGRESS, None),
    ],
)
def test_operator_outcome_is_reported(world: World, phase: str, state: str, reason: Reason, event: str | None) -> None:
    world.instance(status={"state": "in_queue"})
    world.reconcile()
    world.operator("db", phase=phase, message=f"it is {phase}")
    outcome = world.reconcile()
    assert world.status()["state"] == state
    assert world.ready()[1] == reason.value
    assert outcome == DONE  # in progress: the first reconcile's re-check is still due, none is added
    assert world.event_reasons() == ([(reason.value, event)] if event else [])
    if state == "failed":
        assert world.status()["error"] == "it is Failed"
    assert len(world.kube.writes("apply", "ConfigMap")) == 0  # the pending apply is not repeated


def test_a_finalizer_another_controller_added_meanwhile_is_kept(world: World) -> None:
    """Our finalizer write carries the resourceVersion the list was read at: from a stale read it is refused
    (409), not written over the other controller's finalizer; the retry on a fresh read adds ours beside it."""
    world.instance(finalizer=False)
    delivered = world.get()  # what the watch delivered ...
    world.kube.patch_custom(INSTANCES, NS, "db", {"metadata": {"finalizers": ["other.example/keep"]}})  # ... is stale
    world.kube.store.feed(INSTANCES.store_key)
    world.kube.store.put(INSTANCES.store_key, delivered)

    assert world.reconcile() == Outcome(requeue_after=EXACT.conflicts.base)
    assert world.get()["metadata"]["finalizers"] == ["other.example/keep"]
    world.reconcile()
    assert world.get()["metadata"]["finalizers"] == ["other.example/keep", FINALIZER]


@pytest.mark.parametrize("fed_by", ["events", "a listing"])
def test_conflict_on_status_write_rereads(world: World, fed_by: str) -> None:
    """Fed by a listing, the store is complete (absent means absent): the conflict must leave the copy unknown, not
    absent — with ``discard`` the retry found no instance and the instance stayed in_queue for good (issue 31)."""
    world.instance(status={"state": "in_queue"})
    delivered = world.get()  # what the watch delivered ...
    world.kube.patch_custom(INSTANCES, NS, "db", {"metadata": {"labels": {"touched": "yes"}}})  # ... is now stale
    if fed_by == "events":
        world.kube.store.feed(INSTANCES.store_key)
        world.kube.store.put(INSTANCES.store_key, delivered)
    else:
        world.kube.store.replace(INSTANCES.store_key, [delivered])
    world.kube.calls.clear()

    assert world.reconcile() == Outcome(requeue_after=EXACT.conflicts.base)
    assert world.status()["state"] == "in_queue"  # nothing was written
    assert world.kube.writes("patch_status") == [world.kube.calls[0]] and len(world.kube.calls) == 1
    assert world.configmap("db") is None  # recorded first, applied second: the refused record stopped it

    assert world.reconcile() == Outcome(requeue_after=POLL)  # read fresh: applied on the newer version
    assert world.status()["state"] == "in progress"
    assert world.get()["metadata"]["labels"] == {"touched": "yes"}
    assert world.configmap("db") is not None


def test_render_error_counts_then_gives_up(world: World) -> None:
    world.instance(status={"state": "in_queue"}, parameters={"explode": True})
    for count in range(1, THRESHOLD):
        with pytest.raises(TemporaryError, match="ZeroDivisionError"):
            world.reconcile()
        status = world.status()
        assert status["errorCount"] == count and status["state"] == "in_queue"
        assert status["description"].startswith(f"retrying after error {count}/{THRESHOLD}")
    assert world.event_reasons() == [(Reason.RENDER_FAILED.value, "Warning")] * (THRESHOLD - 1)

    assert world.reconcile() == DONE  # past the threshold: the operation failed for good
    status = world.status()
    assert status["state"] == "failed" and status["errorCount"] == THRESHOLD
    assert status["error"].startswith(f"gave up after {THRESHOLD} consecutive errors")
    assert world.ready() == ("False", Reason.GAVE_UP.value)
    assert world.event_reasons()[-1] == (Reason.GAVE_UP.value, "Warning")
    assert world.kube.writes("apply") == []

    world.kube.calls.clear()
    assert world.reconcile() == DONE
    assert world.kube.calls == []  # no retry until a new request


def provisioned(world: World) -> None:
    """An instance its operator reports ready: provisioned by two reconciles, then a clean slate (no calls,
    events or scheduled re-checks)."""
    world.instance(status={"state": "in_queue"})
    world.reconcile()
    world.operator("db", phase="Ready")
    world.reconcile()
    assert world.status()["state"] == "succeeded"
    world.kube.calls.clear()
    world.kube.events.clear()
    world.runtime.memories.forget(Key("instance", NS, "db"))  # as after a restart: no re-check pending


def test_an_operators_write_landing_while_a_check_reads_is_looked_at_by_the_next_reconcile(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check remembers the versions it decided on, not the store's once it is done: the operator's status written
    after the status template read the ConfigMap (its watch event marks the key for one more reconcile) makes that
    reconcile look again and show it. Remembering the store's version after the reads answered it "unchanged" and
    left the instance Ready until the resync (the flapping day-two test's stall)."""
    provisioned(world)
    render_status = RENDERER.render_status
    landed: list[bool] = []

    def then_the_operator_writes(*args: Any, **kwargs: Any) -> Any:
        result = render_status(*args, **kwargs)
        if not landed:
            landed.append(True)
            world.kube.merge_patch(
                ResourceRef(api_version="v1", kind="ConfigMap", name="db", namespace=NS),
                {"data": {"phase": "Failed", "message": "disk full"}},
            )
        return result

    monkeypatch.setattr(RENDERER, "render_status", then_the_operator_writes)
    # Still ready, a new version: the first check renders (the success recorded the one before: status.checked).
    world.kube.merge_patch(
        ResourceRef(api_version="v1", kind="ConfigMap", name="db", namespace=NS), {"data": {"x": "1"}}
    )
    world.reconcile()  # the check: the template read "Ready", as Ready shows; the write lands after the read
    assert landed and world.ready() == ("True", Reason.PROVISIONED.value)
    world.reconcile()  # the write's event
    assert world.ready() == ("False", Reason.UNHEALTHY.value)


def restarted(world: World) -> World:
    """A fresh controller over the same cluster: nothing in memory, the same digest key (loaded from its Secret)."""
    fresh = World(kube=world.kube)
    fresh.catalog.upsert_plan(plan_body())
    return fresh


def test_a_restart_renders_no_settled_instance_its_status_record_answers_and_trusts_no_forged_record(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settled instance's check records what it found (``status.checked``) with a status write it makes anyway —
    the success's first, then any check's that writes; a restarted controller whose store holds the same versions
    renders nothing, writes nothing and follows what it read. A record someone else made for objects they changed
    (the same digest with any key but the controller's) answers nothing: the check renders, and the drift is set
    back."""
    provisioned(world)
    checked = world.status()["checked"]  # the success's write carries its first check
    assert checked["digest"] and checked["sources"] == [] and checked["health"] == "ready"
    renders: list[str] = []
    for name in ("render_objects", "render_status"):
        monkeypatch.setattr(RENDERER, name, functools.partial(_counted, renders, name, getattr(RENDERER, name)))
    world.reconcile()  # the first check of this process (nothing remembered): answered by the record
    assert renders == [] and world.kube.writes() == []

    world.operator("db", phase="Failed", message="disk full")
    world.reconcile()  # the operator's verdict is written: the new record rides on that write
    assert renders and world.ready() == ("False", Reason.UNHEALTHY.value)
    checked = world.status()["checked"]
    assert checked["digest"] and checked["sources"] == []  # the ConfigMap it read is a recorded object
    assert checked["health"] == "unready"

    renders.clear()
    fresh = restarted(world)
    world.kube.calls.clear()
    counted = provision_renders()
    fresh.reconcile()
    assert renders == [] and world.kube.calls == []
    assert provision_renders() == counted  # the metric a restart's cost is read by (bench.restart) agrees
    assert ("v1", "ConfigMap") in fresh.watchers.kinds
    assert fresh.index.owners_of(("v1", "ConfigMap", NS, "db")) == {Key("instance", NS, "db")}

    config = ResourceRef(api_version="v1", kind="ConfigMap", name="db", namespace=NS)
    world.kube.merge_patch(config, {"data": {"size": "9"}})  # the tenant's change, then its record of it
    entry = fresh.catalog.plan(PLAN_ID)
    assert entry is not None
    meta = InstanceView.of(world.get()).meta
    forged = decisions.sources_digest(
        key=DigestKey(b"t" * 32),
        plan_hash=entry.hash,
        instance=meta,
        binding=meta,
        versions=[(config, world.kube.version_of(config))],
    )
    world.kube.patch_custom_status(INSTANCES, NS, "db", {"checked": {"sources": [], "digest": forged}})
    restarted(world).reconcile()
    assert renders and (world.configmap("db") or {})["data"]["size"] == "1"
    assert provision_renders() == counted + 1


def provision_renders() -> float:
    """``opbroker_renders_total`` of instances' ``provision`` (process-wide: compare before and after)."""
    return REGISTRY.get_sample_value("opbroker_renders_total", {"kind": "instance", "action": "provision"}) or 0.0


def test_a_change_landing_before_a_restarts_first_check_follows_its_objects_is_looked_at_at_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first check answered by the record reads the versions before the instance follows what it read: a change
    landing in between sent its event to nobody. Found moved once followed, the instance is looked at again at once
    (the drift set back), not at the next resync sweep."""
    provisioned(world)
    config = ResourceRef(api_version="v1", kind="ConfigMap", name="db", namespace=NS)
    recovered = InstanceReconciler._recovered

    def then_someone_writes(self: InstanceReconciler, facts: InstanceFacts) -> Any:
        found = recovered(self, facts)
        assert found is not None  # the record answers: nothing rendered, nothing followed yet
        world.kube.merge_patch(config, {"data": {"size": "9"}})
        return found

    monkeypatch.setattr(InstanceReconciler, "_recovered", then_someone_writes)
    restarted(world).reconcile()
    assert (world.configmap("db") or {})["data"]["size"] == "1"


def test_a_restarts_first_check_of_a_bound_binding_follows_its_sources_in_the_same_pass(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unchanged, a bound binding's restart check follows its sources in the pass that compared them (one read of the
    binding, not a pass to follow and another to compare); a source moved between that read and the following is
    looked at again at once, and its credentials rendered."""
    provisioned(world)
    world.binding("b")
    world.reconcile("binding", "b")
    passes: list[str] = []
    read = BindingReconciler.read

    def counted(self: BindingReconciler, *args: Any, **kwargs: Any) -> Any:
        passes.append("read")
        return read(self, *args, **kwargs)

    monkeypatch.setattr(BindingReconciler, "read", counted)
    fresh = restarted(world)
    assert resyncs(fresh.reconcile("binding", "b"))
    assert passes == ["read"]
    assert fresh.index.owners_of(("v1", "ConfigMap", NS, "db")) == {Key("binding", NS, "b")}

    renders: list[str] = []
    render_status = RENDERER.render_status
    monkeypatch.setattr(RENDERER, "render_status", lambda *a, **k: renders.append("status") or render_status(*a, **k))
    unchanged = BindingReconciler._unchanged

    def then_the_source_moves(self: BindingReconciler, *args: Any) -> Any:
        seen = unchanged(self, *args)
        if seen is not None and not renders:
            world.operator("db", note="touched")
        return seen

    monkeypatch.setattr(BindingReconciler, "_unchanged", then_the_source_moves)
    restarted(world).reconcile("binding", "b")
    assert renders == ["status"]


def test_only_a_process_first_check_of_an_instance_tries_its_status_record(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trying the record waits (bounded) for its kinds' first listings: a restart's first check does, a check after
    one that did not settle (a debounced verdict leaves no digest in memory) must look at once — the flapping
    operator's last verdict waited 30 s behind that wait in CI."""
    provisioned(world)
    tried: list[Key] = []
    recovered = InstanceReconciler._recovered

    def counted(self: InstanceReconciler, facts: InstanceFacts) -> Any:
        tried.append(facts.key)
        return recovered(self, facts)

    monkeypatch.setattr(InstanceReconciler, "_recovered", counted)
    world.reconcile()  # the first check of this process
    world.operator("db", phase="Failed", message="disk full")
    world.reconcile()  # the verdict written (the record with it)
    world.operator("db", phase="Ready")
    world.reconcile()  # debounced: not settled, no digest in memory
    world.operator("db", phase="Failed", message="down for good")
    world.reconcile()
    assert tried == [Key("instance", NS, "db")]


def _counted(renders: list[str], name: str, render: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    renders.append(name)
    return render(*args, **kwargs)


def test_deleted_instance_without_bindings_releases_its_finalizer(world: World) -> None:
    provisioned(world)
    world.kube.delete_custom(INSTANCES, NS, "db")
    world.kube.calls.clear()

    assert world.reconcile() == Outcome(requeue_after=POLL)  # the ConfigMap is deleted; wait for it to go
    assert world.status()["state"] == "in progress" and world.ready()[1] == Reason.DEPROVISIONING.value
    assert world.configmap("db") is None
    assert ("delete", "ConfigMap") in world.verbs()

    assert world.reconcile() == DONE
    assert world.kube.custom_object(INSTANCES, NS, "db") is None  # last finalizer removed: gone
    assert world.reconcile() == DONE  # and a late event finds nothing to do


def test_deleted_instance_with_nothing_recorded_goes_in_one_reconcile(world: World) -> None:
    world.instance(status={"state": "failed", "observedGeneration": 1})
    world.kube.delete_custom(INSTANCES, NS, "db")
    assert world.reconcile() == DONE  # moved to "deprovisioning" and released in one go, without a conflict
    assert world.kube.custom_object(INSTANCES, NS, "db") is None


def test_deleted_instance_with_bindings_is_blocked(world: World) -> None:
    provisioned(world)
    world.binding()
    world.kube.delete_custom(INSTANCES, NS, "db")
    world.kube.calls.clear()

    assert world.reconcile() == DONE
    status = world.status()
    assert status["state"] == "failed" and world.ready()[1] == Reason.BINDINGS_EXIST.value
    assert "1 binding(s) still exist" in status["error"]
    assert world.get()["metadata"]["finalizers"] == [FINALIZER]
    assert world.configmap("db") is not None  # nothing torn down
    assert world.event_reasons() == [(Reason.BINDINGS_EXIST.value, "Warning")]


@pytest.mark.parametrize(
    ("status", "applies"),
    [
        # in progress for two hours, its apply recorded: only the status template is read
        ({"state": "in progress", "observedGeneration": 1, "operationStartedAt": ago(7200)}, 0),
        # requested two hours ago (the broker's startedAt): applied, then found overdue at once
        ({"state": "in_queue", "lastOperation": {"type": "create", "startedAt": ago(7200)}}, 1),
    ],
    ids=["evaluated", "requested"],
)
def test_max_operation_duration_fails_the_operation(world: World, status: dict[str, Any], applies: int) -> None:
    world.settings = ControllerSettings(status_poll_seconds=POLL, max_operation_seconds=3600)
    world.__post_init__()
    world.instance(status=status)
    assert world.reconcile() == DONE
    status = world.status()
    assert status["state"] == "failed" and world.ready()[1] == Reason.TIMED_OUT.value
    assert "timed out" in status["error"] and "limit 3600s" in status["error"]
    assert world.event_reasons() == [(Reason.TIMED_OUT.value, "Warning")]
    assert len(world.kube.writes("apply", "ConfigMap")) == applies


@pytest.mark.parametrize(
    ("plan_id", "reason"),
    [("no-such-plan", Reason.PLAN_NOT_FOUND)],
)
def test_plan_problem_is_reported(world: World, plan_id: str, reason: Reason) -> None:
    world.instance(status={"state": "in_queue"}, plan_id=plan_id)
    assert world.reconcile() == DONE
    assert world.status()["state"] == "failed" and world.ready()[1] == reason.value
    assert world.kube.writes("apply") == []


def test_plan_without_status_template_succeeds_on_apply(world: World) -> None:
    world.catalog.upsert_plan(plan_body(status=False))
    world.instance(status={"state": "in_queue"})
    assert world.reconcile() == DONE
    status = world.status()
    assert status["state"] == "succeeded" and status["observedGeneration"] == 1
    assert status["appliedPlanHash"] == world.catalog.plan(PLAN_ID).hash  # type: ignore[union-attr]


def test_gone_instance_is_done_without_writes(world: World) -> None:
    assert world.reconcile(name="never-was") == DONE
    assert world.kube.calls == []


# -- bindings -----------------------------------------------------------------------------------------------


def test_binding_is_bound_with_credentials_in_a_secret(world: World) -> None:
    provisioned(world)
    world.binding("b", finalizer=False)

    assert world.reconcile("binding", "b") == DONE
    binding = world.get("binding", "b")
    assert binding["metadata"]["finalizers"] == [FINALIZER]
    status = binding["status"]
    assert status["state"] == "succeeded" and world.ready("binding", "b") == ("True", Reason.BOUND.value)
    assert status["response"] == {"secretRef": "b-credentials"}
    assert status["resources"] == [{"apiVersion": "v1", "kind": "ConfigMap", "name": "b-user", "namespace": NS}]
    secret = world.kube.read_secret(NS, "b-credentials")
    assert secret is not None
    assert json.loads(base64.b64decode(secret["data"][CREDENTIALS_KEY])) == {"credentials": {"user": "b"}}
    assert secret["metadata"]["ownerReferences"][0]["uid"] == binding["metadata"]["uid"]
    assert world.configmap("b-user") is not None
    assert world.event_reasons() == [(Reason.BOUND.value, "Normal")]


def resyncs(outcome: Outcome) -> bool:
    """A settled object's reconcile ends with its next look after the resync period (day two), nothing sooner."""
    return outcome.requeue_after is not None and outcome.requeue_after >= 540


def test_bound_binding_is_rendered_again_only_when_a_source_moved(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 18: a restart over bound bindings renders none of them (nor reads their registries or Secrets)
    while what their credentials were read from stands still; they follow their sources again all the same."""
    provisioned(world)
    world.binding("b")
    world.reconcile("binding", "b")
    status = world.status("binding", "b")
    assert status["state"] == "succeeded"
    assert status["sources"] == [{"apiVersion": "v1", "kind": "ConfigMap", "name": "db", "namespace": NS}]
    assert status["sourcesDigest"]

    world.kube.calls.clear()
    fresh = World(kube=world.kube)  # a restart: nothing in memory
    fresh.catalog.upsert_plan(plan_body())
    renders: list[str] = []
    render_status = RENDERER.render_status
    monkeypatch.setattr(RENDERER, "render_status", lambda *a, **k: renders.append("status") or render_status(*a, **k))
    read_secret = world.kube.read_secret
    monkeypatch.setattr(world.kube, "read_secret", lambda *a, **k: renders.append("secret") or read_secret(*a, **k))
    assert resyncs(fresh.reconcile("binding", "b"))
    assert renders == [] and world.kube.calls == []
    assert ("v1", "ConfigMap") in fresh.watchers.kinds
    assert fresh.index.owners_of(("v1", "ConfigMap", NS, "db")) == {Key("binding", NS, "b")}

    world.operator("db", note="touched")  # the source moved, the credentials did not
    assert fresh.reconcile("binding", "b") == DONE  # its resync is scheduled already (the runtime coalesces)
    assert renders.count("status") == 1 and world.kube.writes() == []
    assert fresh.reconcile("binding", "b") == DONE  # checked once: remembered, not rendered again
    assert renders.count("status") == 1 and world.kube.writes() == []


@pytest.mark.parametrize(
    ("instance_status", "outcome", "state", "reason"),
    [
        (None, DONE, "failed", Reason.INSTANCE_NOT_FOUND),
        ({"state": "failed", "observedGeneration": 1}, DONE, "failed", Reason.INSTANCE_NOT_READY),
        ({"state": "in progress"}, Outcome(requeue_after=POLL), None, None),
    ],
    ids=["instance gone", "instance failed", "instance still provisioning"],
)
def test_binding_waits_or_fails_on_its_instance(
    world: World,
    instance_status: dict[str, Any] | None,
    outcome: Outcome,
    state: str | None,
    reason: Reason | None,
) -> None:
    if instance_status is not None:
        world.instance(status=instance_status)
    world.binding("b")
    assert world.reconcile("binding", "b") == outcome
    assert world.status("binding", "b").get("state") == state
    if reason is not None:
        assert world.ready("binding", "b")[1] == reason.value
        assert world.event_reasons() == [(reason.value, "Warning")]
    else:
        assert world.kube.calls == []  # blocked: nothing written, looked at again later
    assert world.kube.writes("apply") == []


def test_abandoned_binding_is_deleted(world: World) -> None:
    world.binding("b")
    world.reconcile("binding", "b")
    binding = world.get("binding", "b")
    assert binding["metadata"]["deletionTimestamp"]  # never bound: removed (its finalizer runs next)
    assert world.reconcile("binding", "b") == DONE
    assert world.kube.custom_object(BINDINGS, NS, "b") is None


def test_unbind_releases_the_binding(world: World) -> None:
    provisioned(world)
    world.binding("b")
    world.reconcile("binding", "b")
    assert world.status("binding", "b")["state"] == "succeeded"
    world.kube.delete_custom(BINDINGS, NS, "b")
    assert world.reconcile("binding", "b") == Outcome(requeue_after=POLL)  # its ConfigMap is deleted first
    assert world.configmap("b-user") is None
    assert world.reconcile("binding", "b") == DONE
    assert world.kube.custom_object(BINDINGS, NS, "b") is None
    assert world.configmap("db") is not None  # the instance's objects stay


def pause(world: World, kind: str = "instance", name: str = "db", *, paused: bool = True) -> None:
    """An administrator sets (or removes) the pause annotation on the object."""
    kinds = INSTANCES if kind == "instance" else BINDINGS
    world.kube.patch_custom(
        kinds, NS, name, {"metadata": {"annotations": {ANNOTATION_PAUSED: PAUSED if paused else None}}}
    )
    world.kube.calls.clear()
    world.kube.events.clear()


def paused_condition(world: World, kind: str = "instance", name: str = "db") -> tuple[str, str, str]:
    (paused,) = [c for c in world.status(kind, name)["conditions"] if c["type"] == "Paused"]
    return paused["status"], paused["reason"], paused["message"]


def test_a_paused_instance_is_left_alone_until_resumed(world: World) -> None:
    world.instance(finalizer=False, status={"state": "in_queue"})
    pause(world)
    assert world.reconcile() == DONE
    assert world.verbs() == [("patch_status", "SFServiceInstance"), ("event", "SFServiceInstance")]  # nothing else
    assert world.event_reasons() == [("Paused", "Normal")]
    state, reason, message = paused_condition(world)
    assert (state, reason) == ("True", "Paused") and "on the instance itself" in message
    assert world.configmap("db") is None and world.status()["state"] == "in_queue"
    world.kube.calls.clear()
    assert world.reconcile() == DONE and world.verbs() == []  # said once: a look writes nothing

    pause(world, paused=False)
    world.reconcile()
    assert paused_condition(world)[:2] == ("False", "Resumed")
    assert ("Resumed", "Normal") in world.event_reasons()
    configmap = world.configmap("db")
    assert configmap is not None and world.status()["state"] == "in progress"  # resumed from the facts: applied


def test_a_paused_plan_pauses_its_instances_but_never_their_deprovision(world: World) -> None:
    provisioned(world)
    world.catalog.upsert_plan(plan_body(paused=True))
    world.operator("db", phase="Failed", message="boom")  # the operator moves; nobody evaluates it while paused
    world.kube.patch_custom_status(INSTANCES, NS, "db", {"state": "in progress"})
    world.kube.calls.clear()
    assert world.reconcile() == DONE
    assert paused_condition(world)[2].endswith(
        "on its plan opbroker/plan: nothing is applied, evaluated or refreshed until it is removed; a deletion still "
        "proceeds"
    )
    assert world.status()["state"] == "in progress"

    world.kube.delete_custom(INSTANCES, NS, "db")
    assert world.reconcile() == Outcome(requeue_after=POLL)  # the teardown runs all the same
    assert world.configmap("db") is None
    assert world.reconcile() == DONE
    assert world.kube.custom_object(INSTANCES, NS, "db") is None


def test_a_paused_binding_keeps_its_credentials_as_they_are(world: World) -> None:
    provisioned(world)
    world.binding("b")
    world.reconcile("binding", "b")
    assert world.status("binding", "b")["state"] == "succeeded"
    pause(world, "binding", "b")
    assert world.reconcile("binding", "b") == DONE
    assert paused_condition(world, "binding", "b")[:2] == ("True", "Paused")
    world.kube.delete_custom(BINDINGS, NS, "b")
    world.reconcile("binding", "b")
    world.reconcile("binding", "b")
    assert world.kube.custom_object(BINDINGS, NS, "b") is None  # unbound all the same


def test_orphan_templates_leave_their_objects_in_place_without_opbrokers_stamp(world: World) -> None:
    """``deletionPolicy: orphan``: recorded with each object at its apply, and at the unbind and the deprovision the
    objects stay — without opbroker's labels, owner-uid stamp and owner reference — and an Event names them."""
    world.catalog.upsert_plan(plan_body(status=False, orphan=True))
    world.instance(status={"state": "in_queue"})
    assert world.reconcile() == DONE
    db = {"apiVersion": "v1", "kind": "ConfigMap", "name": "db", "namespace": NS, "deletionPolicy": "orphan"}
    assert world.status()["resources"] == [db]
    world.binding("b")
    world.reconcile("binding", "b")
    assert world.status("binding", "b")["resources"] == [{**db, "name": "b-user"}]

    world.kube.events.clear()
    world.kube.delete_custom(BINDINGS, NS, "b")
    assert world.reconcile("binding", "b") == DONE  # nothing deleted, nothing to wait for
    assert world.kube.custom_object(BINDINGS, NS, "b") is None
    world.kube.delete_custom(INSTANCES, NS, "db")
    assert world.reconcile() == DONE
    assert world.kube.custom_object(INSTANCES, NS, "db") is None
    for name in ("b-user", "db"):
        left = world.configmap(name)
        assert left is not None, f"{name} was deleted"
        meta = left["metadata"]
        assert not meta.get("ownerReferences") and ANNOTATION_OWNER_UID not in (meta.get("annotations") or {})
        assert not any(
            label.startswith("opbroker.io/") or label == LABEL_MANAGED_BY for label in meta.get("labels", {})
        )
    orphaned = [e["message"] for e in world.kube.events if e["reason"] == "Orphaned"]
    assert [m.rsplit(": ", 1)[-1] for m in orphaned] == ["ConfigMap team/b-user", "ConfigMap team/db"]


# -- catalog entries ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("templates", "ready", "reason"),
    [
        (plan_body()["spec"]["templates"], "True", Reason.ACCEPTED),
        ([{"action": "provision", "type": "jinja2", "content": "{% if %}"}], "False", Reason.PLAN_INVALID),
    ],
    ids=["accepted", "template does not compile"],
)
def test_plan_entry_verdict_is_written_once(templates: list[dict[str, Any]], ready: str, reason: Reason) -> None:
    kube = FakeKube()
    runtime = Runtime(workers=1)
    runtime.register(PlanEntryReconciler(kube, RENDERER, Catalog()))  # type: ignore[arg-type]
    plan = plan_body()
    plan["spec"]["templates"] = templates
    kube.create(plan)
    key = Key("plan", "opbroker", "plan")

    assert runtime.reconcile_now(key) == DONE
    status = kube.custom_object(PLANS, "opbroker", "plan")["status"]  # type: ignore[index]
    (condition,) = status["conditions"]
    assert (condition["status"], condition["reason"]) == (ready, reason.value)
    assert [c.verb for c in kube.calls] == ["create", "patch_status"]

    kube.calls.clear()
    assert runtime.reconcile_now(key) == DONE
    assert kube.calls == []  # the verdict stands: nothing written again


def test_a_plan_in_use_waits_for_its_instances_then_goes() -> None:
    """The SFPlan guard end to end on the fake: an instance waits for its first apply until the plan's own reconciler
    holds the plan (issue 45: its one writer); deleted under its instance it waits (PlanInUse, a Warning, a
    recheck), refuses a new instance, and goes once its last instance has."""
    world = World()
    plans = PlanEntryReconciler(world.kube, RENDERER, world.catalog, policies=EXACT)  # type: ignore[arg-type]
    world.runtime.register(plans)
    created = world.kube.create(plan_body(held=False))
    assert created is not None
    world.catalog.upsert_plan(created)

    def plan_now() -> dict[str, Any] | None:
        found = world.kube.custom_object(PLANS, "opbroker", "plan")
        if found is not None:
            world.catalog.upsert_plan(found)  # as the watch would
        return found

    world.instance(status={"state": "in_queue"})
    world.reconcile()
    unheld = plan_now()
    assert unheld is not None and not unheld["metadata"].get("finalizers")  # the instance does not write it
    assert world.status("instance")["state"] == "in_queue"  # nor applies before the plan is held
    world.runtime.reconcile_now(Key("plan", "opbroker", "plan"))  # queued by the instance's event (app.on_instance)
    held = plan_now()
    assert held is not None and held["metadata"]["finalizers"] == [FINALIZER]
    world.reconcile()  # brought back by the plan's event
    assert world.status("instance")["state"] == "in progress"

    world.kube.delete_custom(PLANS, "opbroker", "plan")
    assert plan_now() is not None  # held
    recheck = Outcome(requeue_after=EXACT.in_use_recheck.base)  # 30 s (unjittered here)
    assert world.runtime.reconcile_now(Key("plan", "opbroker", "plan")) == recheck
    waiting = plan_now()
    assert waiting is not None
    (ready,) = waiting["status"]["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", Reason.PLAN_IN_USE.value)
    assert ready["message"].startswith("deletion waits: 1 service instance(s) still use this plan")
    assert (Reason.PLAN_IN_USE.value, "Warning") in world.event_reasons()

    world.instance("late", status={"state": "in_queue"})
    assert world.reconcile("instance", "late") == DONE
    assert world.status("instance", "late")["state"] == "failed"
    assert world.ready("instance", "late") == ("False", Reason.PLAN_WITHDRAWN.value)

    for name in ("late", "db"):
        world.kube.delete_custom(INSTANCES, NS, name)
        for _ in range(5):
            if world.kube.custom_object(INSTANCES, NS, name) is None:
                break
            world.reconcile("instance", name)
        assert world.kube.custom_object(INSTANCES, NS, name) is None
    assert world.runtime.reconcile_now(Key("plan", "opbroker", "plan")) == DONE
    assert plan_now() is None


def lifecycle_writes(world: World) -> dict[str, list[tuple[str, str]]]:
    """The writes (verb, kind) of each phase of one instance and one binding, each phase's reconciles made until it is
    over: provision (the operator reporting ready after the apply), bind, unbind, deprovision."""
    phases: dict[str, list[tuple[str, str]]] = {}
    world.instance(status={"state": "in_queue"})
    world.reconcile()
    applied = world.verbs()
    world.operator("db", phase="Ready")
    world.reconcile()
    phases["provision"] = applied + world.verbs()
    world.binding("b")
    world.reconcile("binding", "b")
    phases["bind"] = world.verbs()
    for kind, name, resource in (("binding", "b", BINDINGS), ("instance", "db", INSTANCES)):
        world.kube.delete_custom(resource, NS, name)
        world.kube.calls.clear()
        for _ in range(6):
            if world.kube.custom_object(resource, NS, name) is None:
                break
            world.reconcile(kind, name)
        phases["unbind" if kind == "binding" else "deprovision"] = world.verbs()
    assert world.kube.custom_object(INSTANCES, NS, "db") is None and world.configmap("db") is None
    return phases


def test_a_lifecycle_writes_what_it_wrote_before_effects_stopped_deciding(world: World) -> None:
    """Issue 45 moved the reads of what is let go into observe and guarded the writes: the same writes as before,
    no more (the Secret is created by a POST instead of an apply: one write either way)."""
    secret, instance = ("apply_secret", "Secret"), ("patch_status", "SFServiceInstance")
    binding = ("patch_status", "SFServiceBinding")
    assert lifecycle_writes(world) == {
        # the record, the registry, the apply; the outcome and its Event
        "provision": [instance, secret, ("apply", "ConfigMap"), instance, ("event", "SFServiceInstance")],
        # the record, the registry, the apply; the credentials; the outcome and its Event
        "bind": [binding, secret, ("apply", "ConfigMap"), secret, binding, ("event", "SFServiceBinding")],
        # unbinding, its object deleted; the credentials and the registry deleted, the finalizer removed
        "unbind": [binding, ("delete", "ConfigMap"), ("delete_secret", "Secret"), ("delete_secret", "Secret"),
                   ("patch", "SFServiceBinding")],
        # deprovisioning, its object deleted; the registry deleted, the finalizer removed
        "deprovision": [instance, ("delete", "ConfigMap"), ("delete_secret", "Secret"), ("patch", "SFServiceInstance")],
    }  # fmt: skip
