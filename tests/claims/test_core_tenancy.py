"""Claims across namespaces and the owner-uid stamp (issue 24): pure decisions, table-tested. No server.

Aspects: which services a claim may see (its namespace's; another's only when named in ``serviceNamespaces``
and shared with it); unseen services are neither judged nor named, and a named namespace showing nothing is
reported; a cross-namespace hold counts only when the claim's own record agrees; locality breaks ties; a hold
lasts only while consented; references written ``ns/name``; the claim plan takes, refuses and releases across
namespaces and never writes or deletes a binding Secret without the claim's stamp; the health check never
deletes a Job or writes a Secret without the service's stamp; registration never overwrites an endpoint Secret
without the binding's stamp; catalogs list what is shared with the namespace; the store's sharing index.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from opbroker.api.osb import OperationState
from opbroker.api.primaza import ClaimState, ServiceState
from opbroker.controller.claims import servicebinding
from opbroker.controller.claims.core import (
    catalogs,
    claim_plan,
    matching,
    names,
    registered_plan,
    registering_plan,
    states,
)
from opbroker.controller.claims.core.matching import Candidate, Index, Request
from opbroker.controller.claims.core.views import ClaimView, JobView, ObjectView, ServiceView
from opbroker.controller.claims.reasons import Rejection
from opbroker.controller.claims.settings import ClaimsSettings
from opbroker.controller.claims.store import Store
from opbroker.controller.core import actions as acts
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import BindingView
from opbroker.controller.runtime.clock import FAKE_EPOCH
from opbroker.controller.runtime.keys import Key

HOME, OTHER, THIRD = "team", "shared-db", "stranger"
PG = frozenset({("type", "postgres")})


def candidate(name: str, namespace: str = HOME, **fields: Any) -> Candidate:
    values: dict[str, Any] = {
        "identity": PG,
        "keys": frozenset({"host"}),
        "state": ServiceState.AVAILABLE,
        "namespace": namespace,
        "resource_version": "1",
    }
    values.update(fields)
    return Candidate(name, **values)


def request(*namespaces: str, recorded: tuple[str, str] | None = None) -> Request:
    return Request("c1", PG, ("host",), "dev", namespace=HOME, namespaces=namespaces, recorded=recorded)


# -- who may see what ------------------------------------------------------------------------------------

VISIBILITY = [
    ("own namespace", candidate("pg"), (), True),
    ("own namespace, whatever it shares", candidate("pg", share_with=frozenset({"x"})), (), True),
    ("named and shared by name", candidate("pg", OTHER, share_with=frozenset({HOME})), (OTHER,), True),
    ("named and shared with all", candidate("pg", OTHER, share_with=frozenset({"*"})), (OTHER,), True),
    ("named, not shared", candidate("pg", OTHER), (OTHER,), False),
    ("named, shared with someone else", candidate("pg", OTHER, share_with=frozenset({THIRD})), (OTHER,), False),
    (
        "shared but not named: a stranger cannot push it in",
        candidate("pg", THIRD, share_with=frozenset({"*"})),
        (),
        False,
    ),
    ("shared with all, another namespace named", candidate("pg", THIRD, share_with=frozenset({"*"})), (OTHER,), False),
]


@pytest.mark.parametrize(("reason", "service", "named", "seen"), VISIBILITY, ids=[v[0] for v in VISIBILITY])
def test_visibility(reason: str, service: Candidate, named: tuple[str, ...], seen: bool) -> None:
    assert matching.visible(request(*named), service) is seen
    assert matching.acceptable(request(*named), service) is seen  # otherwise acceptable
    if not seen:
        assert matching.rejections(request(*named), service)[0].startswith(f"{Rejection.NOT_SHARED}:")


def test_unseen_services_are_neither_judged_nor_named() -> None:
    secret = candidate("victims-db", OTHER, sla="L1")
    mine = candidate("mine", sla="L3")
    found = matching.match(request(OTHER), [secret, mine])
    assert found.chosen == mine
    assert [v.name for v in found.verdicts()] == ["mine"]
    assert found.unshared == (OTHER,)
    assert "victims-db" not in str(found.verdicts())


def test_a_named_namespace_that_shares_something_is_not_reported() -> None:
    other = candidate("redis", OTHER, identity=frozenset({("type", "redis")}), share_with=frozenset({HOME}))
    found = matching.match(request(OTHER), [other])
    assert found.chosen is None and found.unshared == ()
    assert [v.name for v in found.verdicts()] == [f"{OTHER}/redis"]  # seen (shared), rejected by identity


def test_a_shared_service_is_named_with_its_namespace_and_taken_from_there() -> None:
    other = candidate("pg", OTHER, share_with=frozenset({HOME}))
    found = matching.match(request(OTHER), [other])
    assert found.chosen == other
    assert matching.ref(found.request, other) == f"{OTHER}/pg"
    assert matching.claimant(found.request, other) == f"{HOME}/c1"
    assert found.verdicts()[0].name == f"{OTHER}/pg"


HOLDS = [
    ("own namespace: claimedBy alone", candidate("pg", claimed_by="c1"), None, True),
    (
        "another namespace: claimedBy and the claim's record",
        candidate("pg", OTHER, claimed_by=f"{HOME}/c1", share_with=frozenset({"*"})),
        (OTHER, "pg"),
        True,
    ),
    (
        "another namespace: claimedBy alone proves nothing",
        candidate("pg", OTHER, claimed_by=f"{HOME}/c1", share_with=frozenset({"*"})),
        None,
        False,
    ),
    (
        "another namespace: a bare name is a claim of that namespace",
        candidate("pg", OTHER, claimed_by="c1", share_with=frozenset({"*"})),
        (OTHER, "pg"),
        False,
    ),
]


@pytest.mark.parametrize(("reason", "service", "recorded", "held"), HOLDS, ids=[h[0] for h in HOLDS])
def test_held_by(reason: str, service: Candidate, recorded: tuple[str, str] | None, held: bool) -> None:
    claim = request(OTHER, recorded=recorded)
    assert matching.held_by(claim, service) is held
    assert matching.acceptable(claim, service) is held  # claimed, so acceptable only when held


def test_a_forged_claimed_by_gives_no_precedence() -> None:
    """A service shared with the claim, whose owner wrote ``claimedBy: team/c1`` in its status, is not ranked
    as held (and, claimed, not taken) unless the claim's own status records it."""
    forged = candidate("lure", OTHER, claimed_by=f"{HOME}/c1", share_with=frozenset({HOME}), sla="L1")
    mine = candidate("mine", sla="L3")
    assert matching.match(request(OTHER), [forged, mine]).chosen == mine


RANKS = [
    ("locality breaks an SLA tie", [candidate("b", OTHER, share_with=frozenset({"*"})), candidate("z")], "z"),
    ("the SLA beats locality", [candidate("b", OTHER, share_with=frozenset({"*"}), sla="L1"), candidate("a")], "b"),
]


@pytest.mark.parametrize(("reason", "services", "winner"), RANKS, ids=[r[0] for r in RANKS])
def test_ranking_across_namespaces(reason: str, services: list[Candidate], winner: str) -> None:
    chosen = matching.match(request(OTHER), services).chosen
    assert chosen is not None and chosen.name == winner


HOLDERS = [
    ("same namespace", HOME, (), HOME, (), True),
    ("shared and looked in", OTHER, (HOME,), HOME, (OTHER,), True),
    ("shared with all and looked in", OTHER, ("*",), HOME, (OTHER,), True),
    ("share withdrawn", OTHER, (), HOME, (OTHER,), False),
    ("the claim no longer looks there", OTHER, (HOME,), HOME, (), False),
]


@pytest.mark.parametrize(
    ("reason", "service_ns", "share_with", "claim_ns", "looks_in", "allowed"), HOLDERS, ids=[h[0] for h in HOLDERS]
)
def test_holder_allowed(
    reason: str, service_ns: str, share_with: tuple[str, ...], claim_ns: str, looks_in: tuple[str, ...], allowed: bool
) -> None:
    assert matching.holder_allowed(service_ns, share_with, claim_ns, looks_in) is allowed


@pytest.mark.parametrize(
    ("namespace", "name", "home", "written"),
    [(HOME, "c1", HOME, "c1"), (HOME, "c1", OTHER, f"{HOME}/c1")],
)
def test_references_across_namespaces(namespace: str, name: str, home: str, written: str) -> None:
    assert names.qualified(namespace, name, home=home) == written
    assert names.parse_ref(written, home=home) == (namespace, name)


# -- the claim's plan --------------------------------------------------------------------------------------

SETTINGS = ClaimsSettings()


def claim(*, looks_in: list[str] | None = None, status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serviceClassIdentity": [{"name": "type", "value": "postgres"}],
        "serviceEndpointDefinitionKeys": ["host"],
        "environmentTag": "dev",
    }
    if looks_in is not None:
        spec["serviceNamespaces"] = looks_in
    return {
        "apiVersion": "primaza.io/v1alpha1",
        "kind": "ServiceClaim",
        "metadata": {
            "name": "c1",
            "namespace": HOME,
            "uid": "claim-uid",
            "resourceVersion": "7",
            "generation": 1,
            "finalizers": [names.FINALIZER],
            **meta,
        },
        "spec": spec,
        "status": status or {},
    }


def service(
    name: str = "pg",
    namespace: str = HOME,
    *,
    claimed_by: str | None = None,
    state: str = "Available",
    share_with: list[str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serviceClassIdentity": [{"name": "type", "value": "postgres"}],
        "serviceEndpointDefinition": [{"name": "host", "value": f"{name}.{namespace}"}],
    }
    if share_with is not None:
        spec["shareWith"] = share_with
    return {
        "apiVersion": "primaza.io/v1alpha1",
        "kind": "RegisteredService",
        "metadata": {"name": name, "namespace": namespace, "uid": f"{name}-uid", "resourceVersion": "3"},
        "spec": spec,
        "status": {"state": state, "claimedBy": claimed_by},
    }


def secret(*, stamped: str | None = "claim-uid", owner_uid: str | None = "claim-uid") -> dict[str, Any]:
    """A Secret named like the claim's binding: stamped (or not), with an owner reference (or not)."""
    meta: dict[str, Any] = {"name": "c1-binding", "namespace": HOME, "uid": "secret-uid", "resourceVersion": "11"}
    if stamped is not None:
        meta["annotations"] = {ANNOTATION_OWNER_UID: stamped}
    if owner_uid is not None:
        meta["ownerReferences"] = [{"kind": "ServiceClaim", "name": "c1", "uid": owner_uid, "controller": True}]
    return {"metadata": meta, "type": "servicebinding.io/postgres", "data": {}}


def facts(body: dict[str, Any], *bodies: dict[str, Any], binding_secret: dict[str, Any] | None = None) -> Any:
    """ClaimFacts the way observe builds them: every body a candidate, services by the claim's names for them."""
    index = Index(matching.candidate_of(b) for b in bodies)
    by_ref = {names.qualified(b["metadata"]["namespace"], b["metadata"]["name"], home=HOME): b for b in bodies}
    holding = tuple(
        ref
        for ref, b in by_ref.items()
        if b["status"].get("claimedBy") == names.qualified(HOME, "c1", home=b["metadata"]["namespace"])
    )
    return claim_plan.ClaimFacts(
        ClaimView.of(body),
        SETTINGS,
        index,
        holding=holding,
        services={ref: ServiceView.of(b) for ref, b in by_ref.items()},
        binding_secret=ObjectView.maybe(binding_secret),
        binding_data=servicebinding.decode(binding_secret),
        now=FAKE_EPOCH,
    )


def kinds(actions: Any) -> list[str]:
    return [type(a).__name__ for a in actions]


def status_write(actions: Any) -> acts.WriteStatus:
    return next(a for a in actions if isinstance(a, acts.WriteStatus))


def ready_reason(write: acts.WriteStatus) -> str:
    return str(next(c for c in write.patch["conditions"] if c["type"] == "Ready")["reason"])


def test_a_shared_service_of_a_named_namespace_is_taken_there() -> None:
    actions = claim_plan.plan(facts(claim(looks_in=[OTHER]), service(namespace=OTHER, share_with=[HOME])))
    assert kinds(actions) == ["Take", "ApplySecret", "WriteStatus"]
    take = actions[0]
    assert isinstance(take, claim_plan.Take)
    assert (take.namespace, take.service, take.patch["claimedBy"]) == (OTHER, "pg", f"{HOME}/c1")
    apply = actions[1]
    assert isinstance(apply, claim_plan.ApplySecret) and apply.manifest["metadata"]["namespace"] == HOME
    assert apply.manifest["metadata"]["annotations"] == {ANNOTATION_OWNER_UID: "claim-uid"}
    assert apply.resource_version is None  # none was there
    assert status_write(actions).patch["registeredService"] == f"{OTHER}/pg"


def test_an_unshared_namespace_is_refused_by_name_and_nothing_is_bound() -> None:
    actions = claim_plan.plan(facts(claim(looks_in=[OTHER]), service(namespace=OTHER)))
    assert kinds(actions) == ["WriteStatus"]
    write = status_write(actions)
    assert write.patch["state"] == ClaimState.PENDING.value and write.patch["candidates"] == []
    assert ready_reason(write) == Reason.REFERENCE_NOT_SHARED
    assert f"namespace {OTHER!r} shares no registered service with {HOME!r}" in write.patch["reason"]
    assert write.event is not None and write.event.reason == Reason.REFERENCE_NOT_SHARED and write.event.warning


def test_a_withdrawn_share_releases_the_service_and_unbinds() -> None:
    held = service(namespace=OTHER, claimed_by=f"{HOME}/c1", state="Claimed")  # shareWith removed meanwhile
    body = claim(looks_in=[OTHER], status={"state": "Resolved", "registeredService": f"{OTHER}/pg"})
    actions = claim_plan.plan(facts(body, held, binding_secret=secret()))
    assert kinds(actions) == ["Release", "DeleteSecret", "WriteStatus"]
    release = actions[0]
    assert isinstance(release, claim_plan.Release) and release.namespace == OTHER
    assert actions[1] == claim_plan.DeleteSecret("c1-binding", "secret-uid")
    assert ready_reason(status_write(actions)) == Reason.REFERENCE_NOT_SHARED


def test_a_forged_status_record_releases_nothing_of_another_claim() -> None:
    """The claim's tenant wrote ``registeredService: shared-db/pg`` into its status; that service is held by a
    claim of its own namespace: not released, not taken."""
    theirs = service(namespace=OTHER, claimed_by="c1", state="Claimed", share_with=["*"])
    body = claim(looks_in=[OTHER], status={"registeredService": f"{OTHER}/pg"})
    actions = claim_plan.plan(facts(body, theirs))
    assert "Release" not in kinds(actions) and "Take" not in kinds(actions)


NOT_OWNED = [
    ("a Secret of someone else's", secret(stamped=None, owner_uid=None)),
    ("an owner reference to the claim is not the stamp", secret(stamped=None)),
    ("another owner's stamp", secret(stamped="someone-else")),
]


@pytest.mark.parametrize(("reason", "existing"), NOT_OWNED, ids=[n[0] for n in NOT_OWNED])
def test_a_binding_secret_without_the_claims_stamp_is_never_written(reason: str, existing: dict[str, Any]) -> None:
    actions = claim_plan.plan(facts(claim(), service(), binding_secret=existing))
    assert kinds(actions) == ["Take", "WriteStatus"]
    write = status_write(actions)
    assert ready_reason(write) == Reason.OBJECT_NOT_OWNED
    assert "'c1-binding' exists and is not stamped as this claim's" in write.patch["conditions"][0]["message"]


@pytest.mark.parametrize(("reason", "existing"), NOT_OWNED, ids=[n[0] for n in NOT_OWNED])
def test_a_binding_secret_without_the_claims_stamp_is_never_deleted(reason: str, existing: dict[str, Any]) -> None:
    held = service(claimed_by="c1", state="Claimed")
    body = claim(deletionTimestamp="now", status={"registeredService": "pg"})
    assert kinds(claim_plan.plan(facts(body, held, binding_secret=existing))) == [
        "Release",
        "EnsureFinalizer",
    ]


def test_the_stamped_binding_secret_is_rewritten_guarded_and_deleted_by_uid() -> None:
    held = service(claimed_by="c1", state="Claimed")
    actions = claim_plan.plan(facts(claim(status={"registeredService": "pg"}), held, binding_secret=secret()))
    apply = next(a for a in actions if isinstance(a, claim_plan.ApplySecret))
    assert apply.resource_version == "11"
    body = claim(deletionTimestamp="now", status={"registeredService": "pg"})
    actions = claim_plan.plan(facts(body, held, binding_secret=secret()))
    assert claim_plan.DeleteSecret("c1-binding", "secret-uid") in actions


# -- health checks ------------------------------------------------------------------------------------------

NOW = 1000.0
WALL = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)


def with_container_check(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["healthcheck"] = {"container": {"image": "example/check:1"}, "periodSeconds": 30}
    return body


def check_facts(**fields: Any) -> registered_plan.RegisteredFacts:
    """Facts as observe builds them: views over the service, its check's Job and Secret."""
    body = with_container_check(service())
    views: dict[str, Any] = {}
    if "job" in fields:
        views["job"] = JobView.maybe(fields["job"])
    if "check_secret" in fields:
        views["check_secret"] = ObjectView.maybe(fields["check_secret"])
    return registered_plan.RegisteredFacts(
        Key("registered", HOME, "pg"), ServiceView.of(body), NOW, WALL, 5.0, **{**fields, **views}
    )


def job(*, stamped: str | None) -> dict[str, Any]:
    annotations = {ANNOTATION_OWNER_UID: stamped} if stamped else {}
    return {"metadata": {"name": "pg-healthcheck", "namespace": HOME, "annotations": annotations}}


def outcome_reason(actions: Any) -> str:
    write = next(a for a in actions if isinstance(a, acts.WriteStatus))
    return str(next(c for c in write.patch["conditions"] if c["type"] == states.HEALTHY_CONDITION)["reason"])


def test_a_job_without_the_services_stamp_is_never_deleted() -> None:
    actions = registered_plan.plan(check_facts(job=job(stamped=None)))
    assert "DeleteJob" not in kinds(actions) and "StartJob" not in kinds(actions)
    assert outcome_reason(actions) == Reason.OBJECT_NOT_OWNED


def test_a_check_secret_without_the_services_stamp_is_never_written() -> None:
    foreign = {"metadata": {"name": "pg-healthcheck", "namespace": HOME, "resourceVersion": "4"}}
    actions = registered_plan.plan(check_facts(check_secret=foreign))
    assert "StartJob" not in kinds(actions)
    assert outcome_reason(actions) == Reason.OBJECT_NOT_OWNED


def test_the_check_runs_with_stamped_objects() -> None:
    stamped = {
        "metadata": {"name": "pg-healthcheck", "annotations": {ANNOTATION_OWNER_UID: "pg-uid"}, "resourceVersion": "4"}
    }
    start = next(
        a for a in registered_plan.plan(check_facts(check_secret=stamped)) if isinstance(a, registered_plan.StartJob)
    )
    assert start.secret_version == "4"
    assert start.secret["metadata"]["annotations"] == {ANNOTATION_OWNER_UID: "pg-uid"}
    assert start.job["metadata"]["annotations"][ANNOTATION_OWNER_UID] == "pg-uid"
    assert start.secret["metadata"]["namespace"] == start.job["metadata"]["namespace"] == HOME


# -- automatic registration ---------------------------------------------------------------------------------


def binding() -> dict[str, Any]:
    return {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceBinding",
        "metadata": {
            "name": "b1",
            "namespace": HOME,
            "uid": "b-uid",
            "annotations": {names.ANNOTATION_REGISTER: "true"},
        },
        "spec": {"serviceId": "svc", "planId": "plan"},
        "status": {"state": OperationState.SUCCEEDED.value, "response": {"secretRef": "b1-creds"}},
    }


CREDENTIALS = {"response": '{"credentials": {"host": "db"}}'}


def endpoint(stamped: str | None) -> dict[str, Any]:
    annotations = {ANNOTATION_OWNER_UID: stamped} if stamped else {}
    return {"metadata": {"name": "b1-endpoint", "uid": "e-uid", "resourceVersion": "9", "annotations": annotations}}


def registration_plan(*, endpoint_secret: dict[str, Any]) -> Any:
    return registering_plan.plan(
        registering_plan.RegistrationFacts(
            Key("registration", HOME, "b1"),
            BindingView.of(binding()),
            None,
            credentials=CREDENTIALS,
            endpoint_secret=ObjectView.of(endpoint_secret),
        )
    )


def test_an_endpoint_secret_without_the_bindings_stamp_is_never_overwritten() -> None:
    actions = registration_plan(endpoint_secret=endpoint(None))
    assert kinds(actions) == ["TrackCredentials", "Event"]
    event = actions[1]
    assert isinstance(event, acts.Event) and event.reason == Reason.OBJECT_NOT_OWNED and event.warning


def test_the_generated_objects_are_stamped_and_rewritten_guarded() -> None:
    register = next(
        a for a in registration_plan(endpoint_secret=endpoint("b-uid")) if isinstance(a, registering_plan.Register)
    )
    assert register.secret_version == "9"
    assert register.endpoint_secret["metadata"]["annotations"] == {ANNOTATION_OWNER_UID: "b-uid"}
    assert register.manifest["metadata"]["annotations"] == {ANNOTATION_OWNER_UID: "b-uid"}
    assert "shareWith" not in register.manifest["spec"]


def test_unbinding_deletes_only_the_stamped_endpoint_secret() -> None:
    gone = registering_plan.RegistrationFacts(
        Key("registration", HOME, "b1"), None, None, endpoint_secret=ObjectView.of(endpoint(None))
    )
    assert kinds(registering_plan.plan(gone)) == ["TrackCredentials"]


# -- catalogs and the store -----------------------------------------------------------------------------------


def test_a_catalog_lists_what_is_shared_with_the_namespace_after_its_own() -> None:
    own = candidate("zeta")
    shared = candidate("alpha", OTHER, share_with=frozenset({HOME}))
    claimed = candidate("beta", OTHER, share_with=frozenset({HOME}), claimed_by="x", state=ServiceState.CLAIMED)
    listed = catalogs.entries([own], "dev", [shared, claimed], HOME)
    assert [(e["name"], e.get("namespace")) for e in listed] == [("zeta", None), ("alpha", OTHER)]


def body_of(name: str, namespace: str, share_with: list[str] | None) -> dict[str, Any]:
    return service(name, namespace, share_with=share_with)


def test_the_store_indexes_who_shares_with_whom() -> None:
    store = Store()
    store.upsert_service(body_of("a", OTHER, [HOME]))
    store.upsert_service(body_of("b", THIRD, ["*"]))
    store.upsert_service(body_of("c", THIRD, None))
    assert sorted(c.name for c in store.shared_with(HOME)) == ["a", "b"]
    assert sorted(c.name for c in store.shared_with(OTHER)) == ["b"]
    assert store.shared_with(THIRD) == []  # its own are not "shared with" it
    store.upsert_service(body_of("a", OTHER, None))  # share withdrawn
    store.remove_service(body_of("b", THIRD, ["*"]))
    assert store.shared_with(HOME) == []


def test_the_store_knows_which_claims_look_in_a_namespace() -> None:
    store = Store()
    store.upsert_claim(claim(looks_in=[OTHER]))
    store.upsert_claim({**claim(), "metadata": {**claim()["metadata"], "name": "c2"}})
    assert [(ns, info.name) for ns, info in store.claims_looking_in(OTHER)] == [(HOME, "c1")]
    assert store.claims_looking_in(HOME) == []
