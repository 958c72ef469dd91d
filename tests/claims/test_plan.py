"""The ServiceClaim plan as a table: facts in, the exact action list out (no cluster, the clock a fact)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from opbroker.controller.claims import servicebinding
from opbroker.controller.claims.core import claim_plan, matching, names
from opbroker.controller.claims.core.claim_plan import ApplySecret, DeleteSecret, Release, Rematch, Take
from opbroker.controller.claims.core.matching import Index
from opbroker.controller.claims.core.views import ClaimView, ObjectView, OwnerRef, ServiceView
from opbroker.controller.claims.settings import ClaimsSettings
from opbroker.controller.core.actions import EnsureFinalizer, Event, Refusal, Refused, Retry, WriteStatus

NS = "team"
NOW = datetime.datetime(2024, 1, 1, 12, 0, tzinfo=datetime.UTC)
STAMP = "2024-01-01T12:00:00Z"


def claim(*, finalizer: bool = True, deleting: bool = False, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c1", "namespace": NS, "uid": "cu", "resourceVersion": "7", "generation": 1}
    meta["finalizers"] = [names.FINALIZER] if finalizer else []
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {
        "apiVersion": "primaza.io/v1alpha1",
        "kind": "ServiceClaim",
        "metadata": meta,
        "spec": {
            "serviceClassIdentity": [{"name": "type", "value": "postgres"}],
            "serviceEndpointDefinitionKeys": ["host"],
            "environmentTag": "dev",
        },
        "status": status,
    }


def service(*, claimed_by: str | None = None, state: str = "Available") -> dict[str, Any]:
    return {
        "apiVersion": "primaza.io/v1alpha1",
        "kind": "RegisteredService",
        "metadata": {"name": "pg", "namespace": NS, "resourceVersion": "3", "generation": 1},
        "spec": {
            "serviceClassIdentity": [{"name": "type", "value": "postgres"}],
            "serviceEndpointDefinition": [{"name": "host", "value": "db"}],
        },
        "status": {"state": state, "claimedBy": claimed_by},
    }


STAMPED = {
    "metadata": {
        "name": "c1-binding",
        "namespace": NS,
        "uid": "s-uid",
        "resourceVersion": "11",
        "annotations": {ANNOTATION_OWNER_UID: "cu"},
    },
    "type": "servicebinding.io/postgres",
    "data": {},
}


def facts(body: dict[str, Any], *, services: dict[str, Any] | None = None, secret: Any = None) -> Any:
    """As observe builds them: the services the watch cache holds are candidates, read live by name."""
    services = services or {}
    live = [s for s in services.values() if s is not None]
    index = Index(matching.candidate_of(s) for s in live)
    holding = tuple(name for name, s in services.items() if s is not None and s["status"]["claimedBy"] == "c1")
    return claim_plan.ClaimFacts(
        ClaimView.of(body),
        ClaimsSettings(),
        index,
        holding=holding,
        services={k: None if v is None else ServiceView.of(v) for k, v in services.items()},
        binding_secret=ObjectView.maybe(secret),
        binding_data=servicebinding.decode(secret),
        now=NOW,
    )


def ready(status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": STAMP,
        "observedGeneration": 1,
    }


def binding_secret() -> dict[str, Any]:
    data = {"type": "postgres", "host": "db"}
    return servicebinding.claim_binding_secret(OwnerRef.of(claim()), data, "postgres")


PENDING = "no registered services in namespace 'team'"
BOUND = "bound to 'pg'; projected into 0 workload(s)"
CANDIDATE = [{"name": "pg", "accepted": True, "reason": "Chosen: rank 1 of 1 (no SLA)"}]


ROWS = [
    pytest.param(facts(claim(finalizer=False, deleting=True)), [], id="deleted-without-its-finalizer"),
    pytest.param(
        facts(claim(deleting=True, registeredService="pg"), services={"pg": service(claimed_by="c1", state="Claimed")}),
        [
            Release(
                NS, "pg", "3", {"claimedBy": None, "state": "Available"}, "Claimed -> Available: released by claim 'c1'"
            ),
            EnsureFinalizer(present=False),
        ],
        id="deleted-releases-what-it-holds-then-its-finalizer",
    ),
    pytest.param(
        facts(
            claim(deleting=True, registeredService="pg"), services={"pg": service(claimed_by="other")}, secret=STAMPED
        ),
        [DeleteSecret("c1-binding", "s-uid"), EnsureFinalizer(present=False)],
        id="deleted-never-frees-anothers-service-deletes-its-stamped-secret",
    ),
    pytest.param(
        facts(claim(finalizer=False)),
        [
            EnsureFinalizer(),
            WriteStatus(
                {
                    "state": "Pending",
                    "registeredService": None,
                    "bindingSecret": None,
                    "reason": PENDING,
                    "candidates": [],
                    "conditions": [ready("False", "NoMatch", PENDING)],
                },
                event=Event("NoMatch", PENDING, warning=True),
            ),
        ],
        id="new-claim-finalizer-then-pending",
    ),
    pytest.param(
        facts(claim(), services={"pg": service()}),
        [
            Take("pg", "3", {"claimedBy": "c1", "state": "Claimed"}, "Available -> Claimed: claimed by 'c1'", NS),
            ApplySecret(binding_secret(), None),
            WriteStatus(
                {
                    "state": "Resolved",
                    "registeredService": "pg",
                    "reason": None,
                    "candidates": CANDIDATE,
                    "bindingSecret": "c1-binding",
                    "conditions": [ready("True", "Bound", BOUND)],
                },
                event=Event("Bound", BOUND),
            ),
        ],
        id="take-bind-resolve",
    ),
    pytest.param(
        facts(claim(), services={"pg": service()}, secret=STAMPED),
        [
            Take("pg", "3", {"claimedBy": "c1", "state": "Claimed"}, "Available -> Claimed: claimed by 'c1'", NS),
            ApplySecret(binding_secret(), "11"),
            Event("CredentialsRotated", "binding Secret 'c1-binding' re-rendered from 'pg'; 0 workload(s) rolled"),
            WriteStatus(
                {
                    "state": "Resolved",
                    "registeredService": "pg",
                    "reason": None,
                    "candidates": CANDIDATE,
                    "bindingSecret": "c1-binding",
                    "conditions": [ready("True", "Bound", BOUND)],
                },
                event=Event("Bound", BOUND),
            ),
        ],
        id="its-own-secret-is-rewritten-guarded-and-the-rotation-said",
    ),
]


@pytest.mark.parametrize(("given", "want"), ROWS)
def test_claim_plan_rows(given: claim_plan.ClaimFacts, want: list[Any]) -> None:
    assert claim_plan.plan(given) == want


def test_the_chosen_service_gone_since_the_match_is_matched_again() -> None:
    """The watch cache still lists it; the live read found nothing."""
    given = facts(claim(), services={"pg": service()})
    gone = claim_plan.ClaimFacts(given.claim, given.settings, given.index, services={"pg": None}, now=NOW)
    assert claim_plan.plan(gone) == [
        Take("pg", "3", {"claimedBy": "c1", "state": "Claimed"}, "Available -> Claimed: claimed by 'c1'", NS),
        Rematch("pg"),
    ]


def test_a_refused_binding_secret_replaces_a_stale_pending_with_the_cause() -> None:
    """The claim was Pending while its service was not yet registered; it took the service since, and its binding
    Secret was refused (a namespace nobody onboarded): the status says that, with the candidates judged now."""
    stale = [{"name": "pg", "accepted": False, "reason": "NotAvailable: state is not yet registered"}]
    body = claim(state="Pending", reason=PENDING, candidates=stale)
    body["status"]["conditions"] = [ready("False", "NoMatch", PENDING)]
    given = facts(body, services={"pg": service(claimed_by="c1", state="Claimed")})
    said = "namespace 'team' is not onboarded: ... Onboard the namespace (`opbroker namespace onboard team`)"
    refusal = Refusal(Refused.OBJECT, said, permanent=False, shown="NamespaceNotOnboarded")
    held = [{"name": "pg", "accepted": True, "reason": "Chosen: rank 1 of 1 (no SLA, already held by this claim)"}]
    wanted = {"state": "Resolved", "registeredService": "pg", "reason": said, "candidates": held}
    event = Event("NamespaceNotOnboarded", said, warning=True)
    assert claim_plan.refused(given, refusal) == [
        WriteStatus({**wanted, "conditions": [ready("False", "NamespaceNotOnboarded", said)]}, event=event),
        Retry(said),
    ]
    # An unknown shown reason (or none) is the binding's failure.
    plain = claim_plan.refused(given, Refusal(Refused.OBJECT, said))
    assert isinstance(plain[0], WriteStatus) and plain[0].patch["conditions"][0]["reason"] == "BindingFailed"
