"""Table tests of the pure plans of the claims kinds and of SFClusters: facts in, actions out, no cluster."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

from opbroker.api.conventions import ANNOTATION_OWNER_UID
from opbroker.api.osb import OperationState
from opbroker.api.primaza import ClaimState, ServiceState
from opbroker.controller.claims.core import catalog_plan, claim_plan, names, registered_plan, registering_plan
from opbroker.controller.claims.core.matching import Candidate, Index
from opbroker.controller.claims.core.views import ClaimView, ObjectView, ServiceView
from opbroker.controller.claims.probes import TcpProbe
from opbroker.controller.claims.settings import ClaimsSettings
from opbroker.controller.core import actions as acts
from opbroker.controller.core.reasons import Reason
from opbroker.controller.core.views import BindingView
from opbroker.controller.runtime.clock import FAKE_EPOCH
from opbroker.controller.runtime.keys import Key

NS = "team"
AVAILABLE = Candidate(
    "pg",
    identity=frozenset({("type", "postgres")}),
    keys=frozenset({"host"}),
    state=ServiceState.AVAILABLE,
    namespace=NS,
)


def kinds(actions: Any) -> list[str]:
    """Action type names (a finalizer action says which way)."""
    return [repr(a) if isinstance(a, acts.EnsureFinalizer) else type(a).__name__ for a in actions]


# -- catalog -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("services", "claim_envs", "configured", "existing", "want"),
    [
        pytest.param((), (), ("dev",), {}, [], id="nothing-in-the-namespace"),
        pytest.param((AVAILABLE,), (), ("dev",), {}, ["apply dev"], id="new-catalog"),
        pytest.param((), ("prod",), (), {}, ["apply prod"], id="a-claims-environment"),
        pytest.param(
            (AVAILABLE,),
            (),
            ("dev",),
            {
                "dev": [
                    {
                        "name": "pg",
                        "serviceClassIdentity": [{"name": "type", "value": "postgres"}],
                        "serviceEndpointDefinitionKeys": ["host"],
                    }
                ]
            },
            [],
            id="unchanged-is-not-rewritten",
        ),
        pytest.param((AVAILABLE,), (), ("dev",), {"dev": [], "old": []}, ["apply dev", "delete old"], id="stale"),
        pytest.param((), (), (), {"old": []}, ["delete old"], id="all-gone"),
    ],
)
def test_catalog_plan(services: Any, claim_envs: Any, configured: Any, existing: Any, want: list[str]) -> None:
    facts = catalog_plan.CatalogFacts(NS, services, claim_envs, configured, existing, any_claims=bool(claim_envs))
    got = [
        f"apply {a.manifest['metadata']['name']}"
        if isinstance(a, catalog_plan.ApplyCatalog)
        else f"delete {a.ref.name}"
        for a in catalog_plan.plan(facts)
    ]
    assert got == want


# -- registration ----------------------------------------------------------------------------------------


def binding(
    *, opted: str | None = "true", state: str | None = OperationState.SUCCEEDED.value, **meta: Any
) -> dict[str, Any]:
    annotations = {names.ANNOTATION_REGISTER: opted} if opted is not None else {}
    return {
        "apiVersion": "osb.servicefabrik.io/v1alpha1",
        "kind": "SFServiceBinding",
        "metadata": {"name": "b1", "namespace": NS, "uid": "u1", "annotations": annotations, **meta},
        "spec": {"serviceId": "svc", "planId": "plan"},
        "status": {"state": state, "response": {"secretRef": "b1-creds"}},
    }


GENERATED = {
    "metadata": {
        "name": "b1",
        "labels": {names.LABEL_SOURCE_BINDING: names.label_value("b1")},
        "annotations": {ANNOTATION_OWNER_UID: "u1"},
        "ownerReferences": [{"kind": "SFServiceBinding", "name": "b1", "uid": "u1"}],
    }
}
#: Generated-looking (label, owner reference) but not stamped: not opbroker's to touch.
FOREIGN = {
    "metadata": {
        "name": "b1",
        "labels": {names.LABEL_SOURCE_BINDING: names.label_value("b1")},
        "ownerReferences": [{"kind": "SFServiceBinding", "name": "b1", "uid": "u1"}],
    }
}
CREDENTIALS = {"response": '{"credentials": {"host": "db", "port": 5432}}'}


@pytest.mark.parametrize(
    ("body", "generated", "credentials", "want"),
    [
        pytest.param(None, None, None, ["TrackCredentials"], id="gone"),
        pytest.param(None, GENERATED, None, ["TrackCredentials", "RemoveGenerated"], id="gone-remove-generated"),
        pytest.param(None, FOREIGN, None, ["TrackCredentials"], id="gone-never-touch-others"),
        pytest.param(binding(opted="false"), GENERATED, None, ["TrackCredentials", "RemoveGenerated"], id="opted-out"),
        pytest.param(
            binding(deletionTimestamp="now"), GENERATED, None, ["TrackCredentials", "RemoveGenerated"], id="unbind"
        ),
        pytest.param(binding(state="in progress"), None, None, ["TrackCredentials"], id="not-succeeded"),
        pytest.param(binding(), None, None, ["TrackCredentials"], id="no-credentials-yet"),
        pytest.param(binding(), None, CREDENTIALS, ["TrackCredentials", "Register", "Event"], id="register"),
        pytest.param(binding(), GENERATED, CREDENTIALS, ["TrackCredentials", "Register"], id="re-register-quietly"),
        pytest.param(binding(), FOREIGN, CREDENTIALS, ["TrackCredentials", "Event"], id="conflict"),
    ],
)
def test_registration_plan(body: Any, generated: Any, credentials: Any, want: list[str]) -> None:
    facts = registering_plan.RegistrationFacts(
        Key("registration", NS, "b1"),
        None if body is None else BindingView.of(body),
        ObjectView.maybe(generated),
        credentials=credentials,
    )
    actions = registering_plan.plan(facts)
    assert kinds(actions) == want
    for action in actions:
        if isinstance(action, registering_plan.Register):
            assert action.manifest["spec"]["serviceEndpointDefinition"][0]["valueFromSecret"]["name"] == "b1-endpoint"
        if isinstance(action, acts.Event) and generated is FOREIGN:
            assert action.reason == Reason.REGISTRATION_CONFLICT and action.warning


# -- claims ----------------------------------------------------------------------------------------------


def claim(
    *, finalizers: tuple[str, ...] = (names.FINALIZER,), status: dict[str, Any] | None = None, **meta: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "primaza.io/v1alpha1",
        "kind": "ServiceClaim",
        "metadata": {
            "name": "c1",
            "namespace": NS,
            "uid": "cu",
            "resourceVersion": "7",
            "generation": 1,
            "finalizers": list(finalizers),
            **meta,
        },
        "spec": {
            "serviceClassIdentity": [{"name": "type", "value": "postgres"}],
            "serviceEndpointDefinitionKeys": ["host"],
            "environmentTag": "dev",
        },
        "status": status or {},
    }


def service_body(name: str = "pg", *, claimed_by: str | None = None, state: str = "Available") -> dict[str, Any]:
    return {
        "apiVersion": "primaza.io/v1alpha1",
        "kind": "RegisteredService",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "3", "generation": 1},
        "spec": {
            "serviceClassIdentity": [{"name": "type", "value": "postgres"}],
            "serviceEndpointDefinition": [{"name": "host", "value": "db"}],
        },
        "status": {"state": state, "claimedBy": claimed_by},
    }


def claim_facts(
    body: dict[str, Any], index: Index, *, holding: tuple[str, ...] = (), services: Any = None
) -> claim_plan.ClaimFacts:
    """ClaimFacts as observe builds them: views over the bodies."""
    views = {k: None if v is None else ServiceView.of(v) for k, v in (services or {}).items()}
    return claim_plan.ClaimFacts(ClaimView.of(body), SETTINGS, index, holding=holding, services=views, now=FAKE_EPOCH)


HELD = Candidate(
    "old", identity=frozenset({("type", "redis")}), state=ServiceState.CLAIMED, claimed_by="c1", namespace=NS
)
SETTINGS = ClaimsSettings()


@pytest.mark.parametrize(
    ("body", "index", "services", "want"),
    [
        pytest.param(claim(deletionTimestamp="now", finalizers=()), (), {}, [], id="deleted-without-finalizer"),
        pytest.param(
            claim(deletionTimestamp="now", status={"registeredService": "pg"}),
            (),
            {"pg": service_body(claimed_by="c1", state="Claimed")},
            ["Release", "EnsureFinalizer(present=False)"],
            id="finalize-releases-what-it-holds",
        ),
        pytest.param(
            claim(deletionTimestamp="now", status={"registeredService": "pg"}),
            (),
            {"pg": service_body(claimed_by="other")},
            ["EnsureFinalizer(present=False)"],
            id="finalize-never-frees-anothers",
        ),
        pytest.param(
            claim(finalizers=()), (), {}, ["EnsureFinalizer(present=True)", "WriteStatus"], id="new-claim-pending"
        ),
        pytest.param(
            claim(status={"state": ClaimState.PENDING.value}), (), {}, ["WriteStatus"], id="pending-no-services"
        ),
        pytest.param(
            claim(), (AVAILABLE,), {"pg": service_body()}, ["Take", "ApplySecret", "WriteStatus"], id="take-and-bind"
        ),
        pytest.param(claim(), (AVAILABLE,), {"pg": None}, ["Take", "Rematch"], id="chosen-gone-rematch"),
        pytest.param(
            claim(),
            (AVAILABLE, HELD),
            {"pg": service_body(), "old": service_body("old", claimed_by="c1", state="Claimed")},
            ["Release", "Take", "ApplySecret", "WriteStatus"],
            id="release-the-one-that-no-longer-wins",
        ),
    ],
)
def test_claim_plan(body: dict[str, Any], index: Any, services: Any, want: list[str]) -> None:
    holding = tuple(c.name for c in index if c.claimed_by == "c1")
    facts = claim_facts(body, Index(index), holding=holding, services=services)
    assert kinds(claim_plan.plan(facts)) == want


def test_claim_plan_take_is_guarded_by_the_matched_version() -> None:
    chosen = Candidate(**{**AVAILABLE.__dict__, "resource_version": "42"})
    facts = claim_facts(claim(), Index([chosen]), services={"pg": service_body()})
    take = next(a for a in claim_plan.plan(facts) if isinstance(a, claim_plan.Take))
    assert (take.service, take.resource_version, take.patch) == ("pg", "42", {"claimedBy": "c1", "state": "Claimed"})


def test_claim_plan_invalid_spec() -> None:
    body = claim(status={"state": ClaimState.RESOLVED.value})
    body["spec"] = {"serviceClassIdentity": "not a list"}
    actions = claim_plan.plan(claim_facts(body, Index([])))
    write = actions[-1]
    assert isinstance(write, acts.WriteStatus) and write.patch["state"] == ClaimState.INVALID.value


# -- registered services -----------------------------------------------------------------------------------

NOW = 1000.0
WALL = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)


def registered_facts(body: dict[str, Any], **fields: Any) -> registered_plan.RegisteredFacts:
    key = Key("registered", NS, body["metadata"]["name"])
    return registered_plan.RegisteredFacts(key, ServiceView.of(body), NOW, WALL, 5.0, **fields)


def with_check(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["healthcheck"] = {"tcp": {"host": "db", "port": 5432}, "periodSeconds": 30}
    return body


def new(body: dict[str, Any]) -> dict[str, Any]:
    body["status"] = {}
    return body


@pytest.mark.parametrize(
    ("facts", "want", "requeue"),
    [
        pytest.param(
            registered_facts(new(service_body())),
            ["WriteStatus", "ForgetObject", "WriteStatus"],
            None,
            id="new-unchecked-becomes-available",
        ),
        pytest.param(
            registered_facts(service_body(claimed_by="c1")),
            ["ForgetObject", "WriteStatus"],
            None,
            id="holder-gone-released",
        ),
        pytest.param(
            registered_facts(service_body(claimed_by="c1", state="Claimed"), holder_exists=True),
            ["ForgetObject", "WriteStatus"],
            None,
            id="held-unchecked-claimed",
        ),
        pytest.param(
            registered_facts(with_check(new(service_body()))),
            ["WriteStatus", "SetSchedule", "SubmitProbe"],
            None,
            id="first-check-submitted",
        ),
        pytest.param(
            registered_facts(with_check(new(service_body())), running=True),
            ["WriteStatus", "SetSchedule"],
            None,
            id="probe-running-wait-for-it",
        ),
    ],
)
def test_registered_plan(facts: registered_plan.RegisteredFacts, want: list[str], requeue: float | None) -> None:
    """No Requeue: the service's (or the prober's) next event brings it back."""
    actions = registered_plan.plan(facts)
    assert kinds(actions) == want
    assert not any(isinstance(a, acts.Requeue) for a in actions) and requeue is None


def test_registered_plan_missing_secret_is_undetermined() -> None:
    body = service_body()
    body["spec"]["serviceEndpointDefinition"] = [{"name": "pw", "valueFromSecret": {"name": "s", "key": "pw"}}]
    actions = registered_plan.plan(registered_facts(body, secrets={"s": None}))
    assert kinds(actions) == ["DropSchedule", "WriteStatus"]
    write = actions[1]
    assert isinstance(write, acts.WriteStatus) and write.patch["state"] == ServiceState.UNDETERMINED.value


def test_registered_plan_probe_not_due_asks_to_come_back() -> None:
    body = with_check(service_body())
    check_fingerprint = next(
        a.schedule.fingerprint
        for a in registered_plan.plan(registered_facts(body))
        if isinstance(a, registered_plan.SetSchedule)
    )
    schedule = registered_plan.Schedule(check_fingerprint, NOW + 10)
    actions = registered_plan.plan(registered_facts(body, schedule=schedule))
    assert [a for a in actions if isinstance(a, registered_plan.SubmitProbe)] == []
    assert actions[-1] == acts.Requeue(10.0)


def test_registered_plan_submits_the_probe_it_builds() -> None:
    actions = registered_plan.plan(registered_facts(with_check(service_body())))
    submit = next(a for a in actions if isinstance(a, registered_plan.SubmitProbe))
    assert submit.probe == TcpProbe(host="db", port=5432, timeout=5.0)
    assert registered_plan.SetSchedule(registered_plan.Schedule(submit.fingerprint, math.inf)) in actions


# The SFCluster plan's table: tests/multicluster/test_cluster_plan.py (exact action lists).
