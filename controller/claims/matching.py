"""Matching a claim to registered services: every candidate judged, the acceptable ones ranked. Pure.

A registered service is *acceptable* for a claim when all of these hold (each failed one is a
:class:`~opbroker.controller.claims.reasons.Rejection` in the claim's ``status.candidates``):

* it lives in the claim's namespace (the caller only passes those) and is not being deleted;
* its spec is valid, and its ``serviceClassIdentity`` names a ``type`` (servicebinding.io needs one);
* every identity pair the claim asks for is among the service's (the service may have more);
* every endpoint key the claim asks for is in the service's ``serviceEndpointDefinition``;
* it is offered in the claim's ``environmentTag`` (:mod:`constraints`);
* it is Available — or it is already held by this very claim (``status.claimedBy``), whatever its
  health: a claim keeps its service through an Unreachable spell, as the seed requires.

Acceptable candidates are ranked by ``(held by this claim first, SLA rank, name)``: a claim never
trades a service it holds for a better one (no churn), the SLA order is configurable (default
``L1 > L2 > L3``; an SLA not in the order, or none, ranks last), and ties go by name, so the outcome
does not depend on list order. The first is chosen.

Performance: :class:`Index` keeps, for each identity pair, the candidates that have it, so a match
looks only at the candidates whose identity fits; rejection texts are written only for the candidates
shown in the status (``limit``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from opbroker.api.errors import field_errors
from opbroker.api.primaza import RegisteredService, ServiceClaim, ServiceState
from opbroker.controller.claims import constraints
from opbroker.controller.claims.reasons import Rejection

IdentityPair = tuple[str, str]
DEFAULT_SLA_ORDER = ("L1", "L2", "L3")


@dataclass(frozen=True)
class Candidate:
    """What matching needs to know of one RegisteredService (digested once per watch event)."""

    name: str
    identity: frozenset[IdentityPair] = frozenset()
    keys: frozenset[str] = frozenset()
    environments: constraints.Environments = constraints.UNCONSTRAINED
    sla: str | None = None
    state: ServiceState | None = None
    claimed_by: str | None = None
    deleting: bool = False
    resource_version: str | None = None
    problem: str | None = None

    @property
    def service_type(self) -> str | None:
        return next((value for name, value in sorted(self.identity) if name == "type"), None)


def candidate_of(body: Mapping[str, Any]) -> Candidate:
    """Digest a RegisteredService as on the wire (an invalid one becomes a candidate with a problem)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    try:
        state = ServiceState(status["state"]) if status.get("state") else None
    except ValueError:
        state = None
    common: dict[str, Any] = {
        "name": meta.get("name", ""),
        "state": state,
        "claimed_by": status.get("claimedBy") or None,
        "deleting": bool(meta.get("deletionTimestamp")),
        "resource_version": meta.get("resourceVersion"),
    }
    try:
        model = RegisteredService.model_validate({k: v for k, v in body.items() if k != "status"})
    except ValidationError as exc:
        return Candidate(problem="; ".join(field_errors(exc)), **common)
    spec = model.spec
    return Candidate(
        identity=frozenset((item.name, item.value) for item in spec.service_class_identity),
        keys=frozenset(item.name for item in spec.service_endpoint_definition),
        environments=constraints.parse(spec.constraints.environments if spec.constraints else None),
        sla=spec.sla,
        **common,
    )


@dataclass(frozen=True)
class Request:
    """What a claim asks for."""

    claim: str
    identity: frozenset[IdentityPair]
    keys: tuple[str, ...]
    environment: str


def request_of(claim: ServiceClaim) -> Request:
    spec = claim.spec
    return Request(
        claim=claim.metadata.name or "",
        identity=frozenset((item.name, item.value) for item in spec.service_class_identity),
        keys=tuple(dict.fromkeys(spec.service_endpoint_definition_keys)),
        environment=spec.environment_tag,
    )


@dataclass(frozen=True)
class SlaOrder:
    """SLA names from best to worst; anything else ranks after all of them."""

    names: tuple[str, ...] = DEFAULT_SLA_ORDER

    def rank(self, sla: str | None) -> int:
        try:
            return self.names.index(sla) if sla is not None else len(self.names)
        except ValueError:
            return len(self.names)


def held_by(request: Request, candidate: Candidate) -> bool:
    return candidate.claimed_by == request.claim


def acceptable(request: Request, candidate: Candidate) -> bool:
    """The fast yes/no of :func:`rejections` (same rules, no texts)."""
    if candidate.problem or candidate.deleting or candidate.service_type is None:
        return False
    if not request.identity <= candidate.identity or not candidate.keys.issuperset(request.keys):
        return False
    if not constraints.offered(candidate.environments, request.environment):
        return False
    if held_by(request, candidate):
        return True
    return candidate.claimed_by is None and candidate.state == ServiceState.AVAILABLE


def rejections(request: Request, candidate: Candidate) -> list[str]:
    """Every reason ``candidate`` cannot serve ``request`` (empty when it can), as ``Code: detail``."""
    if candidate.problem:
        return [f"{Rejection.INVALID}: {candidate.problem}"]
    reasons: list[str] = []
    if candidate.deleting:
        reasons.append(f"{Rejection.DELETING}: the service is being deleted")
    missing_pairs = sorted(request.identity - candidate.identity)
    if missing_pairs:
        have: dict[str, list[str]] = {}
        for name, value in sorted(candidate.identity):
            have.setdefault(name, []).append(value)
        details = [
            f"{name}={value} wanted, has {'/'.join(have[name])}" if name in have else f"{name}={value} wanted, absent"
            for name, value in missing_pairs
        ]
        reasons.append(f"{Rejection.IDENTITY_MISMATCH}: {'; '.join(details)}")
    elif candidate.service_type is None:
        reasons.append(f"{Rejection.NO_TYPE}: serviceClassIdentity has no 'type' (servicebinding.io requires one)")
    missing_keys = [key for key in request.keys if key not in candidate.keys]
    if missing_keys:
        reasons.append(f"{Rejection.MISSING_KEYS}: {', '.join(missing_keys)}")
    if not constraints.offered(candidate.environments, request.environment):
        reasons.append(f"{Rejection.ENVIRONMENT}: {constraints.explain(candidate.environments, request.environment)}")
    if not held_by(request, candidate):
        if candidate.claimed_by is not None:
            reasons.append(f"{Rejection.CLAIMED}: held by claim {candidate.claimed_by!r}")
        elif candidate.state != ServiceState.AVAILABLE:
            state = candidate.state.value if candidate.state else "not yet registered"
            reasons.append(f"{Rejection.NOT_AVAILABLE}: state is {state}")
    return reasons


class Index:
    """The candidates of one namespace, indexed by identity pair. Immutable once built."""

    def __init__(self, candidates: Iterable[Candidate]) -> None:
        self.candidates: tuple[Candidate, ...] = tuple(sorted(candidates, key=lambda c: c.name))
        by_pair: dict[IdentityPair, list[int]] = {}
        for position, candidate in enumerate(self.candidates):
            for pair in candidate.identity:
                by_pair.setdefault(pair, []).append(position)
        self._by_pair = {pair: frozenset(positions) for pair, positions in by_pair.items()}
        self._everyone = frozenset(range(len(self.candidates)))

    def __len__(self) -> int:
        return len(self.candidates)

    def fitting(self, identity: frozenset[IdentityPair]) -> frozenset[int]:
        """Positions of the candidates that have every pair of ``identity``."""
        result: frozenset[int] | None = None
        for pair in sorted(identity, key=lambda p: len(self._by_pair.get(p, ()))):
            positions = self._by_pair.get(pair, frozenset())
            result = positions if result is None else result & positions
            if not result:
                return frozenset()
        return self._everyone if result is None else result


@dataclass(frozen=True)
class Verdict:
    name: str
    accepted: bool
    reason: str

    def as_status(self) -> dict[str, Any]:
        return {"name": self.name, "accepted": self.accepted, "reason": self.reason}


@dataclass(frozen=True)
class Match:
    request: Request
    ranked: tuple[Candidate, ...]
    """Acceptable candidates, best first; the first is chosen."""
    index: Index
    sla_order: SlaOrder = field(default_factory=SlaOrder)

    @property
    def chosen(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    @property
    def rejected_count(self) -> int:
        return len(self.index) - len(self.ranked)

    def rejected(self) -> Iterator[Candidate]:
        """The candidates that are not acceptable, by name (computed on demand)."""
        accepted = {c.name for c in self.ranked}
        return (c for c in self.index.candidates if c.name not in accepted)

    def verdicts(self, limit: int | None = None) -> list[Verdict]:
        """Acceptable candidates in rank order, then rejected ones by name, with their reasons."""
        verdicts: list[Verdict] = []
        total = len(self.ranked)
        for rank, candidate in enumerate(self.ranked, start=1):
            if limit is not None and len(verdicts) >= limit:
                return verdicts
            sla = f"SLA {candidate.sla}" if candidate.sla else "no SLA"
            held = ", already held by this claim" if held_by(self.request, candidate) else ""
            if rank == 1:
                reason = f"Chosen: rank 1 of {total} ({sla}{held})"
            else:
                reason = f"Acceptable: rank {rank} of {total} ({sla}); a better-ranked service was chosen"
            verdicts.append(Verdict(candidate.name, True, reason))
        for candidate in self.rejected():
            if limit is not None and len(verdicts) >= limit:
                break
            verdicts.append(Verdict(candidate.name, False, "; ".join(rejections(self.request, candidate))))
        return verdicts


def rank_key(request: Request, candidate: Candidate, sla_order: SlaOrder) -> tuple[int, int, str]:
    return (0 if held_by(request, candidate) else 1, sla_order.rank(candidate.sla), candidate.name)


def match(request: Request, candidates: Index | Sequence[Candidate], sla_order: SlaOrder | None = None) -> Match:
    """Judge every candidate for ``request``; rank the acceptable ones (see the module docstring)."""
    order = sla_order or SlaOrder()
    index = candidates if isinstance(candidates, Index) else Index(candidates)
    accepted = [
        index.candidates[position]
        for position in index.fitting(request.identity)
        if acceptable(request, index.candidates[position])
    ]
    accepted.sort(key=lambda c: rank_key(request, c, order))
    return Match(request=request, ranked=tuple(accepted), index=index, sla_order=order)
