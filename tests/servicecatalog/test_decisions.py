"""The Service Catalog reconcilers' pure parts, table-tested: the next step of an Instance and a Binding, a
relist's class changes and timing, and the tenancy rules (who holds an external id, consent, Secrets, Broker
credentials)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from opbroker import osbclient
from opbroker.api.conventions import ANNOTATION_OWNER_UID
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import conditions_of
from opbroker.controller.runtime.keys import Key
from opbroker.controller.servicecatalog import bindings, instances
from opbroker.controller.servicecatalog.bindingrefs import BindingRef
from opbroker.controller.servicecatalog.common import Unresolved
from opbroker.controller.servicecatalog.core import (
    binding_plan,
    broker_plan,
    endpoints,
    instance_plan,
    relisting,
    tenancy,
)
from opbroker.controller.servicecatalog.core.views import (
    BrokerSpec,
    BrokerView,
    CatalogObject,
    PlanEntry,
    ReviewRequest,
    ServiceClassView,
)
from opbroker.controller.servicecatalog.resources import FINALIZER

V = CatalogObject.of

OFFERING: Any = object()  # next_step only asks whether there is one


def obj(*, held: bool = True, deleting: bool = False, generation: int = 1, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x", "namespace": "n", "generation": generation}
    if held:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {}, "status": status}


PROBLEM = Unresolved(Reason.REFERENCES_NON_EXISTENT_CLASS, "no class")
IS = instances.Step

INSTANCE_CASES = [
    ("new: finalizer first", obj(held=False), OFFERING, None, (), IS.ADD_FINALIZER),
    ("held, never provisioned", obj(), OFFERING, None, (), IS.PROVISION),
    ("class missing", obj(), None, PROBLEM, (), IS.UNRESOLVED),
    ("provisioned, settled", obj(provisionStatus="Provisioned", observedGeneration=1), OFFERING, None, (), IS.NOTHING),
    (
        "spec changed: update",
        obj(generation=2, provisionStatus="Provisioned", observedGeneration=1),
        OFFERING,
        None,
        (),
        IS.UPDATE,
    ),
    (
        "failed, waiting for a spec change",
        obj(observedGeneration=1, provisionStatus="NotProvisioned"),
        OFFERING,
        None,
        (),
        IS.NOTHING,
    ),
    ("operation in flight: poll, nothing else", obj(generation=2, asyncOpInProgress=True), OFFERING, None, (), IS.POLL),
    ("in flight while deleted: poll first", obj(deleting=True, asyncOpInProgress=True), OFFERING, None, (), IS.POLL),
    ("orphan mitigation pending", obj(orphanMitigationInProgress=True), OFFERING, None, (), IS.MITIGATE),
    (
        "deleted with bindings: blocked",
        obj(deleting=True, deprovisionStatus="Required"),
        OFFERING,
        None,
        ("n/b",),
        IS.BLOCKED,
    ),
    (
        "deleted, provisioned: deprovision",
        obj(deleting=True, deprovisionStatus="Required"),
        OFFERING,
        None,
        (),
        IS.DEPROVISION,
    ),
    (
        "deleted, deprovision failed: again",
        obj(deleting=True, deprovisionStatus="Failed"),
        OFFERING,
        None,
        (),
        IS.DEPROVISION,
    ),
    (
        "deleted, nothing at the broker",
        obj(deleting=True, deprovisionStatus="NotRequired"),
        OFFERING,
        None,
        (),
        IS.REMOVE_FINALIZER,
    ),
    ("deleted, never sent", obj(deleting=True), OFFERING, None, (), IS.REMOVE_FINALIZER),
    ("deleted, class gone", obj(deleting=True, deprovisionStatus="Required"), None, PROBLEM, (), IS.UNRESOLVED),
    ("deleted, released", obj(held=False, deleting=True), OFFERING, None, (), IS.NOTHING),
    # The status may be anyone's words: an operation "under way" with no class to speak to waits, never crashes.
    ("in flight, class gone: wait", obj(asyncOpInProgress=True), None, PROBLEM, (), IS.UNRESOLVED),
    (
        "mitigation, class gone: wait",
        obj(deleting=True, orphanMitigationInProgress=True),
        None,
        None,
        (),
        IS.UNRESOLVED,
    ),
]


@pytest.mark.parametrize(
    ("body", "offering", "problem", "bound", "want"),
    [c[1:] for c in INSTANCE_CASES],
    ids=[c[0] for c in INSTANCE_CASES],
)
def test_instance_next_step(
    body: dict[str, Any], offering: Any, problem: Any, bound: tuple[str, ...], want: instances.Step
) -> None:
    facts = instances.InstanceFacts(Key("scinstance", "n", "x"), body, offering, {}, problem, bound)
    assert instances.next_step(facts) is want


HELD = {"planName": "p", "planExternalID": "p-1", "parametersChecksum": "c1"}  # recorded before updateRequests


@pytest.mark.parametrize(
    ("why", "desired", "want"),
    [
        ("only shareWith changed: recorded, nothing sent", {**HELD, "updateRequests": 0}, IS.SETTLE),
        ("other parameters", {**HELD, "parametersChecksum": "c2", "updateRequests": 0}, IS.UPDATE),
        ("another plan", {**HELD, "planExternalID": "p-2", "updateRequests": 0}, IS.UPDATE),
        ("updateRequests bumped", {**HELD, "updateRequests": 1}, IS.UPDATE),
        ("not resolved: as before, an update", None, IS.UPDATE),
    ],
)
def test_a_spec_change_updates_only_what_the_broker_knows(
    why: str, desired: dict[str, Any] | None, want: instances.Step
) -> None:
    body = obj(generation=2, provisionStatus="Provisioned", observedGeneration=1, externalProperties=HELD)
    facts = instances.InstanceFacts(Key("scinstance", "n", "x"), body, OFFERING, {}, None, (), desired=desired)
    assert instances.next_step(facts) is want, why


IN_USE = Unresolved(Reason.EXTERNAL_ID_IN_USE, "held by another")
# An Instance that does not hold its (chosen) id: its status — which its owner can write — claims what it likes.
FORGED = {"provisionStatus": "Provisioned", "deprovisionStatus": "Required", "observedGeneration": 1}
NOT_OURS_CASES = [
    ("never provisioned: refused", obj(), IS.UNRESOLVED),
    ("status claims provisioned, spec changed: no update", obj(generation=2, **FORGED), IS.UNRESOLVED),
    ("status claims an operation in flight: no poll", obj(asyncOpInProgress=True, **FORGED), IS.UNRESOLVED),
    ("status claims a mitigation: no deprovision", obj(orphanMitigationInProgress=True), IS.UNRESOLVED),
    ("deleted, status claims provisioned: no deprovision", obj(deleting=True, **FORGED), IS.REMOVE_FINALIZER),
    ("deleted, with bindings: not held up either", obj(deleting=True, **FORGED), IS.REMOVE_FINALIZER),
    ("new: finalizer first", obj(held=False), IS.ADD_FINALIZER),
]


@pytest.mark.parametrize(("body", "want"), [c[1:] for c in NOT_OURS_CASES], ids=[c[0] for c in NOT_OURS_CASES])
def test_an_instance_without_its_id_sends_nothing(body: dict[str, Any], want: instances.Step) -> None:
    facts = instances.InstanceFacts(Key("scinstance", "n", "x"), body, OFFERING, {}, IN_USE, ("n/b",), owns_id=False)
    assert instances.next_step(facts) is want


B = bindings.Step
NOT_READY = Unresolved(Reason.ERROR_INSTANCE_NOT_READY, "not ready")
BINDING_CASES = [
    ("new: finalizer first", obj(held=False), OFFERING, None, B.ADD_FINALIZER),
    ("instance ready: bind", obj(), OFFERING, None, B.BIND),
    ("instance not ready: wait", obj(), OFFERING, NOT_READY, B.UNRESOLVED),
    ("bound", obj(observedGeneration=1, unbindStatus="Required"), OFFERING, None, B.NOTHING),
    ("async bind in flight", obj(asyncOpInProgress=True), OFFERING, None, B.POLL),
    ("mitigation pending", obj(orphanMitigationInProgress=True), OFFERING, None, B.MITIGATE),
    ("deleted, bound: unbind", obj(deleting=True, unbindStatus="Required"), OFFERING, None, B.UNBIND),
    ("deleted, never bound", obj(deleting=True), OFFERING, None, B.REMOVE_FINALIZER),
    ("deleted, unbound", obj(deleting=True, unbindStatus="Succeeded"), OFFERING, None, B.REMOVE_FINALIZER),
    ("async bind in flight, class gone: wait", obj(asyncOpInProgress=True), None, NOT_READY, B.UNRESOLVED),
    ("mitigation, class gone: wait", obj(deleting=True, orphanMitigationInProgress=True), None, None, B.UNRESOLVED),
]


def test_an_operation_under_way_without_a_class_is_said_on_the_object_not_a_crash() -> None:
    """The plan (not only the step) holds: the conditions name the missing class; nothing is sent."""
    body = obj(deleting=True, orphanMitigationInProgress=True)
    for planned in (
        instance_plan.plan(instances.InstanceFacts(Key("scinstance", "n", "x"), body, None, {}, None, ())),
        binding_plan.plan(bindings.BindingFacts(Key("scbinding", "n", "x"), body, {}, None, {}, None)),
    ):
        assert planned and not any(type(action).__name__ == "Call" for action in planned)
        assert "ServiceClass" in str(planned)


@pytest.mark.parametrize(
    ("body", "offering", "problem", "want"), [c[1:] for c in BINDING_CASES], ids=[c[0] for c in BINDING_CASES]
)
def test_binding_next_step(body: dict[str, Any], offering: Any, problem: Any, want: bindings.Step) -> None:
    facts = bindings.BindingFacts(Key("scbinding", "n", "x"), body, {}, offering, {}, problem)
    assert bindings.next_step(facts) is want


NOT_SHARED = Unresolved(Reason.REFERENCE_NOT_SHARED, "not shared")
BOUND = {"unbindStatus": "Required", "observedGeneration": 1, "secretName": "x"}
TENANCY_BINDING_CASES = [
    # (why, body, offering, problem, consented, owns_ids, want)
    ("no consent, never bound: refused, nothing sent", obj(), OFFERING, NOT_SHARED, False, True, B.UNRESOLVED),
    (
        "no consent, deleted, never bound: released",
        obj(deleting=True),
        OFFERING,
        NOT_SHARED,
        False,
        True,
        B.REMOVE_FINALIZER,
    ),
    ("consent withdrawn from a bound binding: unbind", obj(**BOUND), OFFERING, NOT_SHARED, False, True, B.UNBIND),
    ("consent withdrawn, class gone: wait", obj(**BOUND), None, NOT_SHARED, False, True, B.UNRESOLVED),
    (
        "consent withdrawn, unbound: wait for it",
        obj(unbindStatus="Succeeded"),
        OFFERING,
        NOT_SHARED,
        False,
        True,
        B.UNRESOLVED,
    ),
    ("consent given: bind", obj(), OFFERING, None, True, True, B.BIND),
    ("someone else's id: refused", obj(), OFFERING, IN_USE, True, False, B.UNRESOLVED),
    (
        "someone else's id, status claims bound: no unbind",
        obj(deleting=True, **BOUND),
        OFFERING,
        IN_USE,
        True,
        False,
        B.REMOVE_FINALIZER,
    ),
    (
        "someone else's id, status claims a bind in flight: no poll",
        obj(asyncOpInProgress=True),
        OFFERING,
        IN_USE,
        True,
        False,
        B.UNRESOLVED,
    ),
    ("Secret not ours: refused", obj(), OFFERING, Unresolved(Reason.SECRET_NOT_OWNED, "x"), True, True, B.UNRESOLVED),
]


@pytest.mark.parametrize(
    ("body", "offering", "problem", "consented", "owns_ids", "want"),
    [c[1:] for c in TENANCY_BINDING_CASES],
    ids=[c[0] for c in TENANCY_BINDING_CASES],
)
def test_binding_next_step_under_the_tenancy_rules(
    body: dict[str, Any], offering: Any, problem: Any, consented: bool, owns_ids: bool, want: bindings.Step
) -> None:
    facts = bindings.BindingFacts(
        Key("scbinding", "n", "x"), body, {}, offering, {}, problem, consented=consented, owns_ids=owns_ids
    )
    assert bindings.next_step(facts) is want


def claimant(uid: str, created: str, external_id: str | None = None) -> dict[str, Any]:
    spec = {"externalID": external_id} if external_id else {}
    return {"metadata": {"uid": uid, "creationTimestamp": created}, "spec": spec}


def test_an_id_is_derived_from_the_uid_unless_chosen_and_never_read_from_the_status() -> None:
    derived = claimant("u1", "2026-01-01T00:00:00Z")
    assert tenancy.external_id(V(derived)) == tenancy.derived_id("u1") != tenancy.derived_id("u2")
    assert tenancy.external_id(V({**derived, "status": {"externalID": "victim"}})) == tenancy.derived_id("u1")
    assert tenancy.external_id(V(claimant("u1", "2026-01-01T00:00:00Z", "mine"))) == "mine"
    assert not tenancy.chosen(V(derived)) and tenancy.chosen(V(claimant("u1", "t", "mine")))


VICTIM_ID = tenancy.derived_id("victim")
HOLD_CASES = [
    # (why, body, others, holds)
    (
        "a derived id is always its own",
        claimant("a", "2026-01-02T00:00:00Z"),
        [claimant("b", "2026-01-01T00:00:00Z", tenancy.derived_id("a"))],
        True,
    ),
    (
        "a chosen id nobody else has",
        claimant("a", "2026-01-02T00:00:00Z", "x"),
        [claimant("b", "2026-01-01T00:00:00Z", "y")],
        True,
    ),
    (
        "itself among the others",
        claimant("a", "2026-01-02T00:00:00Z", "x"),
        [claimant("a", "2026-01-02T00:00:00Z", "x")],
        True,
    ),
    (
        "another's derived id",
        claimant("a", "2026-01-01T00:00:00Z", VICTIM_ID),
        [claimant("victim", "2026-01-02T00:00:00Z")],
        False,
    ),
    (
        "chosen earlier by another",
        claimant("a", "2026-01-02T00:00:00Z", "x"),
        [claimant("b", "2026-01-01T00:00:00Z", "x")],
        False,
    ),
    (
        "chosen later by another",
        claimant("a", "2026-01-01T00:00:00Z", "x"),
        [claimant("b", "2026-01-02T00:00:00Z", "x")],
        True,
    ),
    (
        "chosen in the same second: neither",
        claimant("a", "2026-01-01T00:00:00Z", "x"),
        [claimant("b", "2026-01-01T00:00:00Z", "x")],
        False,
    ),
    (
        "another's status naming it proves nothing",
        claimant("a", "2026-01-02T00:00:00Z", "x"),
        [{**claimant("b", "2026-01-01T00:00:00Z"), "status": {"externalID": "x"}}],
        True,
    ),
    (
        "a chosen id that breaks the OSB id rule (made before the schema refused it): held by nobody",
        claimant("a", "2026-01-01T00:00:00Z", f"../{VICTIM_ID}/service_bindings/x"),
        [],
        False,
    ),
]


@pytest.mark.parametrize(("body", "others", "holds"), [c[1:] for c in HOLD_CASES], ids=[c[0] for c in HOLD_CASES])
def test_who_holds_an_external_id(body: dict[str, Any], others: list[dict[str, Any]], holds: bool) -> None:
    assert tenancy.holds_external_id(V(body), [V(o) for o in others]) is holds


@pytest.mark.parametrize("chosen", ["../victim/service_bindings/x", "x/../victim", ".", "..", "a?b", "%2e%2e"])
def test_a_chosen_id_that_would_leave_its_url_segment_is_named_by_the_rule(chosen: str) -> None:
    problem = tenancy.id_problem(V(claimant("a", "2026-01-01T00:00:00Z", chosen)))
    assert problem is not None and problem.endswith(osbclient.ID_RULE)
    assert tenancy.id_problem(V(claimant("a", "2026-01-01T00:00:00Z", "a b ünïcödé"))) is None
    assert tenancy.id_problem(V(claimant("a", "2026-01-01T00:00:00Z"))) is None  # a derived id is a UUID


@pytest.mark.parametrize(
    ("chosen_id", "status", "want"),
    [
        (True, 409, (Reason.EXTERNAL_ID_IN_USE, True)),  # the broker has it already: someone else's
        (True, 400, (Reason.PROVISION_CALL_FAILED, True)),  # refused: nothing of ours was made
        (True, None, (Reason.PROVISION_CALL_FAILED, True)),  # e.g. the operation was gone
        (False, 409, (Reason.PROVISION_CALL_FAILED, False)),  # a derived id is only ever ours
        (False, 400, (Reason.PROVISION_CALL_FAILED, False)),
    ],
)
def test_a_refused_chosen_id_is_disowned(chosen_id: bool, status: int | None, want: tuple[Reason, bool]) -> None:
    assert tenancy.refusal(chosen_id=chosen_id, status=status, failure=Reason.PROVISION_CALL_FAILED) == want


def instance_in(namespace: str, share_with: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {} if share_with is None else {"shareWith": share_with}
    return {"metadata": {"name": "db", "namespace": namespace}, "spec": spec}


@pytest.mark.parametrize(
    ("instance", "referrer", "want"),
    [
        (instance_in("payments"), "payments", True),
        (instance_in("payments"), "attacker", False),
        (instance_in("payments", []), "attacker", False),
        (instance_in("payments", ["apps"]), "attacker", False),
        (instance_in("payments", ["apps", "attacker"]), "attacker", True),
        (instance_in("payments", ["*"]), "attacker", True),
    ],
)
def test_an_instance_is_used_from_another_namespace_only_with_consent(
    instance: dict[str, Any], referrer: str, want: bool
) -> None:
    assert tenancy.shared_with(V(instance), referrer) is want


def test_a_binding_touches_only_a_secret_it_stamped() -> None:
    ours = {"metadata": {"name": "s", "annotations": {ANNOTATION_OWNER_UID: "b-uid"}}}
    assert tenancy.may_write_secret(None, "b-uid")  # absent: it may be created
    assert tenancy.may_write_secret(ours, "b-uid")
    assert not tenancy.may_write_secret(ours, "other-uid")
    assert not tenancy.may_write_secret({"metadata": {"name": "s"}}, "b-uid")
    owned_only = {"metadata": {"name": "s", "ownerReferences": [{"uid": "b-uid"}]}}
    assert not tenancy.may_write_secret(owned_only, "b-uid")  # the stamp is the rule
    assert tenancy.stamp("b-uid") == {ANNOTATION_OWNER_UID: "b-uid"}


def test_a_brokers_credentials_are_read_only_from_the_control_plane_namespace() -> None:
    def spec(namespace: str) -> dict[str, Any]:
        return {"url": "http://b", "authInfo": {"basic": {"secretRef": {"namespace": namespace, "name": "auth"}}}}

    assert endpoints.auth_secret_ref(BrokerSpec.of(spec("opbroker")), control_plane="opbroker") == (
        "basic",
        "opbroker",
        "auth",
    )
    assert endpoints.auth_secret_ref(BrokerSpec.of({"url": "http://b"}), control_plane="opbroker") is None
    with pytest.raises(endpoints.SecretOutsideControlPlane) as refused:
        endpoints.auth_secret_ref(BrokerSpec.of(spec("payments")), control_plane="opbroker")
    assert refused.value.reason is Reason.AUTH_SECRET_NOT_IN_CONTROL_PLANE
    assert "payments/auth" in str(refused.value) and "opbroker" in str(refused.value)


BROKER = {"apiVersion": "servicecatalog.k8s.io/v1alpha1", "kind": "Broker", "metadata": {"name": "b", "uid": "u"}}


def service(name: str, sid: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "id": sid,
        "description": "d",
        "bindable": True,
        "plans": [{"name": "p", "id": f"{sid}-p"}],
        **extra,
    }


def read(*services: dict[str, Any]) -> tuple[Any, ...]:
    """The services as the controller gets them: read by the OSB client."""
    from opbroker import osbclient

    return osbclient.catalog.read({"services": list(services)}).services


def desired(raw: dict[str, Any]) -> dict[str, Any]:
    body, problems = relisting.desired_class(BrokerView.of(BROKER), read(raw)[0])
    assert body is not None and not problems, problems
    return body


def held(body: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**body, "metadata": {**body["metadata"], "resourceVersion": "7"}, "status": status}


def test_class_changes() -> None:
    same = desired(service("Same", "1"))
    changed = desired(service("Changed", "2"))
    gone = desired(service("Gone", "3"))
    back = desired(service("Back", "4"))
    theirs = {**desired(service("Taken", "5")), "brokerName": "other"}
    catalog = read(
        service("Same", "1"),
        service("Changed", "2", description="new"),
        service("Back", "4"),
        service("Taken", "5"),
        service("New_One", "6"),
    )
    changes = relisting.class_changes(
        BrokerView.of(BROKER),
        catalog,
        [
            ServiceClassView.of(c)
            for c in (held(same), held(changed), held(gone), held(back, removedFromBrokerCatalog=True), held(theirs))
        ],
    )
    assert [c["metadata"]["name"] for c in changes.create] == ["new-one"]
    assert [(c["metadata"]["name"], c["description"]) for c in changes.update] == [("changed", "new")]
    assert changes.update[0]["metadata"]["resourceVersion"] == "7"  # guarded by the version held
    assert changes.removed == ("gone",)
    assert changes.restored == ("back",)
    assert changes.conflicts == ("Taken",)


NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def broker(
    *, relist: str = "15m", behavior: str = "Duration", requests: int = 0, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec = {"url": "http://b", "relistDuration": relist, "relistBehavior": behavior, "relistRequests": requests}
    return {"metadata": {"name": "b", "generation": 1}, "spec": spec, "status": status or {}}


def listed(minutes_ago: int, **extra: Any) -> dict[str, Any]:
    when = (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "observedGeneration": 1,
        "lastCatalogRetrievalTime": when,
        "conditions": [{"type": "Ready", "status": "True"}],
        **extra,
    }


@pytest.mark.parametrize(
    ("reason", "body", "want"),
    [
        ("never listed", broker(), 0.0),
        ("listed 5 of 15 minutes ago", broker(status=listed(5)), 600.0),
        ("listed 20 minutes ago", broker(status=listed(20)), -300.0),
        ("manual, listed", broker(behavior="Manual", status=listed(500)), None),
        ("manual, requested", broker(behavior="Manual", requests=1, status=listed(1)), 0.0),
        ("requested again", broker(requests=2, status=listed(1, reconciledRelistRequests=1)), 0.0),
        (
            "last attempt failed",
            broker(status={**listed(1), "conditions": [{"type": "Ready", "status": "False"}]}),
            0.0,
        ),
    ],
)
def test_relist_due(reason: str, body: dict[str, Any], want: float | None) -> None:
    assert relisting.relist_due(BrokerView.of(body), NOW) == want, reason


def test_admission_refuses_deleting_an_instance_with_bindings() -> None:
    from opbroker.controller.servicecatalog.core import admission

    instance = {"metadata": {"name": "db", "namespace": "a"}, "spec": {"shareWith": ["b"]}}
    bindings_ = [
        {"metadata": {"name": "same-ns", "namespace": "a"}, "spec": {"instanceRef": {"name": "db"}}},
        {"metadata": {"name": "other-ns", "namespace": "b"}, "spec": {"instanceRef": {"name": "db", "namespace": "a"}}},
        {"metadata": {"name": "unrelated", "namespace": "b"}, "spec": {"instanceRef": {"name": "db"}}},
        # Not shared with: bound to nothing, so it holds up nothing (whatever its status claims).
        {
            "metadata": {"name": "squatter", "namespace": "c"},
            "spec": {"instanceRef": {"name": "db", "namespace": "a"}},
            "status": {"unbindStatus": "Required"},
        },
    ]
    refs = [BindingRef.of(b) for b in bindings_]
    found = admission.bindings_of(V(instance), refs)
    assert found == ["a/same-ns", "b/other-ns"]
    assert admission.bindings_of(V({**instance, "spec": {}}), refs) == ["a/same-ns"]
    request = ReviewRequest.of({"uid": "u1", "operation": "DELETE", "oldObject": instance})
    refused = admission.review(request, found)["response"]
    assert refused["uid"] == "u1" and refused["allowed"] is False and refused["status"]["code"] == 409
    assert "a/same-ns, b/other-ns" in refused["status"]["message"]
    deleting = ReviewRequest.of({"uid": "u2", "operation": "DELETE", "oldObject": instance})
    assert admission.review(deleting, [])["response"]["allowed"]
    assert admission.review(ReviewRequest.of({"uid": "u3", "operation": "UPDATE"}), found)["response"]["allowed"]


def test_a_plans_maximum_polling_duration_is_listed_and_shortens_the_polling() -> None:
    from opbroker import osbclient
    from opbroker.controller.servicecatalog.common import Offering, pacing

    limited = service("Limited", "7")
    limited["plans"][0]["maximum_polling_duration"] = 30
    listed_plan = desired(limited)["plans"][0]
    assert listed_plan["maximumPollingDuration"] == 30
    as_text = service("Text", "9")
    as_text["plans"][0]["maximum_polling_duration"] = "30"  # a number sent as a string is the number
    assert desired(as_text)["plans"][0]["maximumPollingDuration"] == 30
    for bad in (0, -5, "soon", True, 1.5):  # a broker's mistake in an optional field is left out, not fatal
        broken = service("Broken", "8")
        broken["plans"][0]["maximum_polling_duration"] = bad
        (read_service,) = read(broken)
        body, _ = relisting.desired_class(BrokerView.of(BROKER), read_service)
        assert body is not None and "maximumPollingDuration" not in body["plans"][0]

    controllers = osbclient.Backoff(base=1.0, maximum=30.0, max_duration=3600.0)
    broker_ = osbclient.Broker(url="http://b")
    none = ServiceClassView.of({})
    assert pacing(controllers, Offering(none, PlanEntry.of(listed_plan), broker_)).max_duration == 30.0
    longer = PlanEntry.of({"maximumPollingDuration": 7200})
    assert pacing(controllers, Offering(none, longer, broker_)) is controllers  # never longer
    assert pacing(controllers, Offering(none, PlanEntry.of({"name": "p"}), broker_)) is controllers
    assert pacing(controllers, None) is controllers


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_final_failure_survives_its_orphan_mitigation() -> None:
    from opbroker.controller.servicecatalog.core.operations import keeping_failed, terminal_mitigation
    from opbroker.controller.servicecatalog.core.statuses import conditions

    failed = {"type": "Failed", "status": "True", "reason": "AsyncOperationTimedOut", "message": "too slow"}
    final = V(obj(generation=2, observedGeneration=2, orphanMitigationInProgress=True, conditions=[failed]))
    retried = V(obj(generation=2, orphanMitigationInProgress=True))  # a 5xx: no verdict for this generation
    changed = V(obj(generation=3, observedGeneration=2, orphanMitigationInProgress=True, conditions=[failed]))
    assert terminal_mitigation(final)
    assert not terminal_mitigation(retried) and not terminal_mitigation(changed)  # a spec change means retry

    listed = conditions(final, ready=False, reason=Reason.ORPHAN_MITIGATION, message="deprovisioning", now=T0)
    assert [c["type"] for c in listed] == ["Ready"]  # new conditions drop Failed...
    kept = keeping_failed(final, listed, keep=True)
    assert [c["type"] for c in kept] == ["Ready", "Failed"] and kept[1] == failed  # ...unless it is kept
    assert keeping_failed(final, listed, keep=False) == listed


@pytest.mark.parametrize(
    ("reason", "spec", "status", "want"),
    [
        ("never fetched", {}, {}, "2.17"),
        ("pinned, never fetched", {"brokerAPIVersion": "2.15"}, {}, "2.15"),
        ("accepted before, same spec", {}, {"observedGeneration": 1, "brokerAPIVersion": "2.14"}, "2.14"),
        ("the spec changed: probe upward", {}, {"observedGeneration": 0, "brokerAPIVersion": "2.14"}, "2.17"),
        (
            "a relist was requested: probe upward",
            {"relistRequests": 1},
            {"observedGeneration": 1, "brokerAPIVersion": "2.14", "reconciledRelistRequests": 0},
            "2.17",
        ),
        (
            "never above the spec",
            {"brokerAPIVersion": "2.14"},
            {"observedGeneration": 1, "brokerAPIVersion": "2.16"},
            "2.14",
        ),
        ("an unknown recorded version", {}, {"observedGeneration": 1, "brokerAPIVersion": "9.9"}, "2.17"),
    ],
)
def test_the_version_a_catalog_fetch_starts_from(
    reason: str, spec: dict[str, Any], status: dict[str, Any], want: str
) -> None:
    body = {"metadata": {"name": "b", "generation": 1}, "spec": {"url": "http://b", **spec}, "status": status}
    assert relisting.version_to_speak(BrokerView.of(body)) == want, reason


def test_an_instances_broker_speaks_the_version_its_broker_accepted() -> None:
    spec = {"url": "http://b"}
    assert endpoints.endpoint(BrokerSpec.of(spec), None).api_version == "2.17"
    assert endpoints.accepted_version(BrokerView.of({"spec": spec, "status": {"brokerAPIVersion": "2.13"}})) == "2.13"
    pinned = {"spec": {**spec, "brokerAPIVersion": "2.14"}, "status": {"brokerAPIVersion": "2.16"}}
    assert endpoints.accepted_version(BrokerView.of(pinned)) == "2.14"  # the spec was lowered since the fetch
    assert endpoints.accepted_version(BrokerView.of({"spec": spec, "status": {}})) is None
    assert endpoints.endpoint(BrokerSpec.of(spec), None, version="2.13").api_version == "2.13"


def test_a_plan_or_class_the_model_refuses_is_skipped_and_named() -> None:
    from opbroker import osbclient

    raw = service("Svc", "1")
    raw["plans"] = [{"name": "Two Words", "id": "p1"}, {"name": "fine", "id": "p2"}]
    body, problems = relisting.desired_class(BrokerView.of(BROKER), read(raw)[0])
    assert body is not None and [p["name"] for p in body["plans"]] == ["fine"]
    (problem,) = problems
    assert (problem.service, problem.plan, problem.field, problem.skipped) == ("Svc", "Two Words", "name", True)
    spaced = service("Has Space", "2")  # an externalName must hold no whitespace: the class cannot be written
    body, problems = relisting.desired_class(BrokerView.of(BROKER), read(spaced)[0])
    assert body is None and problems[-1].field == "externalName"
    changes = relisting.class_changes(BrokerView.of(BROKER), read(service("Svc", "1"), spaced, service("svc", "3")), [])
    assert [c["externalName"] for c in changes.create] == ["Svc"]
    assert [(p.service, p.field) for p in changes.problems] == [("Has Space", "externalName"), ("svc", "name")]
    assert changes.listed == 1
    assert isinstance(changes.problems[0], osbclient.catalog.Problem)


def test_catalog_completeness_and_refusals_become_a_condition_and_an_event() -> None:
    from opbroker import osbclient

    ok, event = broker_plan.completeness([], (), generation=3, now=NOW)
    assert [(c["type"], c["status"], c["reason"]) for c in ok] == [("CatalogComplete", "True", "AllEntriesListed")]
    assert event is None
    dropped = osbclient.catalog.Problem("db", "small", "free", "is a string ('x'), not a boolean: ignored", False)
    skipped = osbclient.catalog.Problem("db", "Bad Plan", "name", "cannot be represented", True)
    listed, event = broker_plan.completeness(ok, (dropped,), generation=3, now=NOW)
    assert (listed[-1]["status"], listed[-1]["reason"]) == ("True", "CatalogFieldsIgnored")
    conditions, event = broker_plan.completeness(listed, (dropped, skipped), generation=3, now=NOW)
    (complete,) = [c for c in conditions if c["type"] == "CatalogComplete"]
    assert (complete["status"], complete["reason"]) == ("False", "CatalogEntriesSkipped")
    assert complete["message"].index("plan 'Bad Plan'") < complete["message"].index("plan 'small'")  # skipped first
    assert event is not None and event[0] is Reason.CATALOG_ENTRIES_SKIPPED and event[2] is True
    many = [osbclient.catalog.Problem("s", f"p{i}", "name", "x", True) for i in range(20)]
    assert "and 12 more" in broker_plan.completeness([], many, generation=1, now=NOW)[0][0]["message"]

    refused = osbclient.catalog.Problem("db", None, "(object)", "the API server refused ServiceClass db (422)", True)
    status = broker_plan.RelistStatus({"observedGeneration": 3}, conditions_of(ok), 2)
    written, event = broker_plan.with_refusals(status, [refused], 3, None, NOW)
    new_status = written.wire()
    assert new_status["serviceClassCount"] == 1 and new_status["observedGeneration"] == 3
    (complete,) = [c for c in new_status["conditions"] if c["type"] == "CatalogComplete"]
    assert complete["status"] == "False" and "refused ServiceClass db" in complete["message"]
    assert event is not None and event[0] is Reason.CATALOG_ENTRIES_SKIPPED


def test_a_class_says_whether_its_instances_are_retrievable_only_when_they_are() -> None:
    """``instancesRetrievable`` is written for a service with ``instances_retrievable`` (day two looks at its
    Instances at the broker), absent otherwise (classes relisted before stay unchanged)."""
    retrievable = service("Fetchable", "9")
    retrievable["instances_retrievable"] = True
    body = desired(retrievable)
    assert body["instancesRetrievable"] is True and ServiceClassView.of(body).instances_retrievable
    plain = desired(service("Plain", "10"))
    assert "instancesRetrievable" not in plain and not ServiceClassView.of(plain).instances_retrievable
