"""Matching claims to registered services: every candidate judged, acceptable ones ranked. No server.

Aspects: the example manifests match; each rejection reason (identity, endpoint keys, environment,
claimed by another, not Available, being deleted, invalid, no ``type``); a held service stays acceptable
whatever its health; ranking (SLA order, unknown and absent SLA last, ties by name, held first, custom
order); determinism under any input order; verdict lists (accepted first, rejected by name, limit); the
identity index agrees with a brute-force scan.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from opbroker.api.primaza import ServiceClaim, ServiceState
from opbroker.controller.claims.core import constraints, matching
from opbroker.controller.claims.core.matching import Candidate, Request, SlaOrder

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "primaza" / "registeredservice-postgresql.yaml"

PG = frozenset({("type", "postgresql"), ("provider", "aws")})
KEYS = frozenset({"host", "port", "username", "password"})


def candidate(name: str, **overrides: Any) -> Candidate:
    fields: dict[str, Any] = {
        "name": name,
        "identity": PG,
        "keys": KEYS,
        "state": ServiceState.AVAILABLE,
        "resource_version": "1",
    }
    fields.update(overrides)
    return Candidate(**fields)


REQUEST = Request(
    claim="app-db", identity=frozenset({("type", "postgresql")}), keys=("host", "password"), environment="dev"
)


def test_the_example_claim_matches_the_example_service() -> None:
    service, claim = yaml.safe_load_all(EXAMPLE.read_text())
    service["status"] = {"state": "Available"}
    found = matching.candidate_of(service)
    assert found.problem is None
    assert found.identity == {("type", "postgresql"), ("provider", "aws"), ("version", "14")}
    assert found.keys == {"host", "port", "username", "password"}
    assert found.sla == "L3" and found.service_type == "postgresql"
    request = matching.request_of(ServiceClaim.model_validate(claim))
    assert request == Request(
        "orders-app-db", frozenset({("type", "postgresql")}), KEYS_ORDER, "dev", namespace="primaza-system"
    )
    assert matching.match(request, [found]).chosen == found
    prod = Request(request.claim, request.identity, request.keys, "prod", namespace=request.namespace)
    assert matching.match(prod, [found]).chosen is None  # the example excludes prod


KEYS_ORDER = ("host", "port", "username", "password")

# (reason, candidate, the codes of its rejection, or [] when acceptable)
REJECTIONS = [
    ("acceptable", candidate("s"), []),
    ("extra identity pairs are fine", candidate("s", identity=PG | {("version", "14")}), []),
    ("other type", candidate("s", identity=frozenset({("type", "mysql")})), ["IdentityMismatch"]),
    (
        "an identity exactly as asked",
        candidate("s", identity=frozenset({("type", "postgresql")})),
        [],
    ),
    ("missing endpoint key", candidate("s", keys=frozenset({"host"})), ["MissingEndpointKeys"]),
    (
        "excluded from the claim's environment",
        candidate("s", environments=constraints.parse(["!dev"])),
        ["NotOfferedInEnvironment"],
    ),
    (
        "only offered elsewhere",
        candidate("s", environments=constraints.parse(["prod"])),
        ["NotOfferedInEnvironment"],
    ),
    ("claimed by another claim", candidate("s", claimed_by="other", state=ServiceState.CLAIMED), ["ClaimedByAnother"]),
    ("not checked yet", candidate("s", state=ServiceState.REGISTERED), ["NotAvailable"]),
    ("unreachable", candidate("s", state=ServiceState.UNREACHABLE), ["NotAvailable"]),
    ("undetermined", candidate("s", state=ServiceState.UNDETERMINED), ["NotAvailable"]),
    ("no status yet", candidate("s", state=None), ["NotAvailable"]),
    ("being deleted", candidate("s", deleting=True), ["BeingDeleted"]),
    ("invalid spec", candidate("s", problem="spec: broken"), ["InvalidService"]),
    (
        "no type identity (servicebinding.io needs one)",
        candidate("s", identity=frozenset({("provider", "aws")})),
        ["IdentityMismatch"],
    ),
    (
        "several reasons at once",
        candidate("s", keys=frozenset(), environments=constraints.parse(["!dev"]), state=ServiceState.UNREACHABLE),
        ["MissingEndpointKeys", "NotOfferedInEnvironment", "NotAvailable"],
    ),
    (
        "held by this claim: acceptable even while Unreachable",
        candidate("s", claimed_by="app-db", state=ServiceState.UNREACHABLE),
        [],
    ),
    (
        "held by this claim but no longer matching",
        candidate("s", claimed_by="app-db", state=ServiceState.CLAIMED, keys=frozenset({"host"})),
        ["MissingEndpointKeys"],
    ),
]


@pytest.mark.parametrize(("reason", "service", "codes"), REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_rejections(reason: str, service: Candidate, codes: list[str]) -> None:
    found = matching.rejections(REQUEST, service)
    assert [text.split(":")[0] for text in found] == codes, reason
    assert matching.acceptable(REQUEST, service) == (not codes)


def test_no_type_identity_is_its_own_reason_when_the_claim_does_not_ask_for_type() -> None:
    request = Request("c", frozenset({("provider", "aws")}), ("host",), "dev")
    service = candidate("s", identity=frozenset({("provider", "aws")}))
    assert [r.split(":")[0] for r in matching.rejections(request, service)] == ["NoTypeIdentity"]
    assert not matching.acceptable(request, service)


def test_rejection_texts_say_what_is_wrong() -> None:
    service = candidate("s", identity=frozenset({("type", "mysql")}), keys=frozenset({"host"}))
    assert matching.rejections(REQUEST, service) == [
        "IdentityMismatch: type=postgresql wanted, has mysql",
        "MissingEndpointKeys: password",
    ]
    other = candidate("t", claimed_by="other", state=ServiceState.CLAIMED)
    assert matching.rejections(REQUEST, other) == ["ClaimedByAnother: held by claim 'other'"]


# (reason, candidates, expected order of names)
RANKINGS = [
    (
        "SLA order L1 > L2 > L3",
        [candidate("a", sla="L3"), candidate("b", sla="L1"), candidate("c", sla="L2")],
        ["b", "c", "a"],
    ),
    (
        "unknown and absent SLA rank last, by name",
        [candidate("z", sla=None), candidate("y", sla="gold"), candidate("x", sla="L3")],
        ["x", "y", "z"],
    ),
    (
        "ties go by name",
        [candidate("m", sla="L1"), candidate("b", sla="L1"), candidate("k", sla="L1")],
        ["b", "k", "m"],
    ),
    (
        "the service this claim holds ranks first (no churn)",
        [candidate("a", sla="L1"), candidate("h", sla="L3", claimed_by="app-db", state=ServiceState.CLAIMED)],
        ["h", "a"],
    ),
    (
        "rejected ones are not ranked",
        [candidate("a", sla="L1", state=ServiceState.UNREACHABLE), candidate("b", sla="L2")],
        ["b"],
    ),
]


@pytest.mark.parametrize(("reason", "services", "order"), RANKINGS, ids=[r[0] for r in RANKINGS])
def test_ranking(reason: str, services: list[Candidate], order: list[str]) -> None:
    found = matching.match(REQUEST, services)
    assert [c.name for c in found.ranked] == order, reason
    assert found.chosen is not None and found.chosen.name == order[0]


def test_the_sla_order_is_configurable() -> None:
    services = [candidate("a", sla="bronze"), candidate("b", sla="gold"), candidate("c", sla="silver")]
    order = SlaOrder(("gold", "silver", "bronze"))
    assert [c.name for c in matching.match(REQUEST, services, order).ranked] == ["b", "c", "a"]
    assert order.rank("platinum") == order.rank(None) == 3


def test_no_candidate_means_no_match() -> None:
    found = matching.match(REQUEST, [])
    assert found.chosen is None and found.verdicts() == []


def test_the_outcome_does_not_depend_on_list_order() -> None:
    services = [
        candidate("a", sla="L2"),
        candidate("b", sla="L1"),
        candidate("c", sla="L1"),
        candidate("d", state=ServiceState.UNREACHABLE),
        candidate("e", keys=frozenset()),
    ]
    outcomes = {
        tuple((v.name, v.accepted, v.reason) for v in matching.match(REQUEST, list(p)).verdicts())
        for p in itertools.permutations(services)
    }
    assert len(outcomes) == 1


def test_verdicts_list_accepted_in_rank_order_then_rejected_by_name() -> None:
    services = [
        candidate("zeta", state=ServiceState.REGISTERED),
        candidate("alpha", keys=frozenset({"host"})),
        candidate("beta", sla="L2"),
        candidate("gamma", sla="L1"),
    ]
    verdicts = matching.match(REQUEST, services).verdicts()
    assert [(v.name, v.accepted) for v in verdicts] == [
        ("gamma", True),
        ("beta", True),
        ("alpha", False),
        ("zeta", False),
    ]
    assert verdicts[0].reason == "Chosen: rank 1 of 2 (SLA L1)"
    assert verdicts[1].reason.startswith("Acceptable: rank 2 of 2 (SLA L2)")
    assert verdicts[2].reason == "MissingEndpointKeys: password"
    assert verdicts[3].reason == "NotAvailable: state is Registered"
    assert [v.name for v in matching.match(REQUEST, services).verdicts(limit=3)] == ["gamma", "beta", "alpha"]
    assert verdicts[0].as_status() == {"name": "gamma", "accepted": True, "reason": verdicts[0].reason}


def test_candidate_of_an_invalid_service_records_the_problem() -> None:
    body = {
        "apiVersion": "primaza.io/v1alpha1",
        "kind": "RegisteredService",
        "metadata": {"name": "broken", "namespace": "n", "resourceVersion": "7"},
        "spec": {
            "serviceClassIdentity": [{"name": "type", "value": "x"}],
            "serviceEndpointDefinition": [{"name": "host"}],
        },
        "status": {"state": "Available", "claimedBy": "c1"},
    }
    found = matching.candidate_of(body)
    assert found.problem and "exactly one of value or valueFromSecret" in found.problem
    assert (found.state, found.claimed_by, found.resource_version) == (ServiceState.AVAILABLE, "c1", "7")
    assert not matching.acceptable(REQUEST, found)


pairs = st.sampled_from([("type", "postgresql"), ("type", "mysql"), ("provider", "aws"), ("tier", "gold")])


@settings(max_examples=200, deadline=None)
@given(
    identities=st.lists(st.frozensets(pairs, max_size=3), min_size=0, max_size=12),
    wanted=st.frozensets(pairs, max_size=2),
    seed=st.integers(0, 1000),
)
def test_the_index_agrees_with_a_brute_force_scan(
    identities: list[frozenset[tuple[str, str]]], wanted: frozenset[tuple[str, str]], seed: int
) -> None:
    rng = random.Random(seed)
    services = [
        candidate(f"s{i}", identity=identity, sla=rng.choice(["L1", "L2", None]), state=rng.choice(list(ServiceState)))
        for i, identity in enumerate(identities)
    ]
    request = Request("c", wanted, ("host",), "dev")
    brute = sorted(
        (s for s in services if matching.acceptable(request, s)),
        key=lambda s: matching.rank_key(request, s, SlaOrder()),
    )
    found = matching.match(request, matching.Index(services))
    assert list(found.ranked) == brute
    assert found.rejected_count == len(services) - len(brute)
    assert {c.name for c in found.rejected()} == {s.name for s in services} - {s.name for s in brute}
