"""Matching a claim to registered services: every candidate judged, the acceptable ones ranked. Pure.

Which services a claim can see at all (the one cross-namespace rule, :func:`opbroker.api.conventions.may_refer`):
those of its own namespace, and those of a namespace the claim names in ``serviceNamespaces`` that *share*
with the claim's namespace (``spec.shareWith`` lists it, or ``*``). Consent is two-sided, as with Gateway
API's ReferenceGrant: the service's owner shares, and the claim names where it looks — so a stranger sharing
a look-alike service cannot slip it into another team's claim. A service that is not visible is not judged,
not ranked and not named in the claim's status (its name is not the claim's to know); a named namespace that
shows the claim nothing is reported as a whole (:attr:`Match.unshared`).

No exception for the control-plane namespace: in Primaza the platform binds namespaces to environments
(``ClusterEnvironment``), so "offered in the environment" is the platform's word; here a claim's
``environmentTag`` is written by the claimant, so an environment is a filter, never a consent. The platform
offers a service to everyone with ``shareWith: ["*"]``, and its environment constraints keep applying.

A visible registered service is *acceptable* for a claim when all of these hold (each failed one is a
:class:`~opbroker.controller.claims.reasons.Rejection` in the claim's ``status.candidates``):

* it is not being deleted;
* its spec is valid, and its ``serviceClassIdentity`` names a ``type`` (servicebinding.io needs one);
* every identity pair the claim asks for is among the service's (the service may have more);
* every endpoint key the claim asks for is in the service's ``serviceEndpointDefinition``;
* it is offered in the claim's ``environmentTag`` (:mod:`constraints`);
* it is Available — or it is already held by this very claim (``status.claimedBy``), whatever its
  health: a claim keeps its service through an Unreachable spell, as the seed requires. A service of
  another namespace counts as held only when the claim's own ``status.registeredService`` names it too:
  its ``claimedBy`` is written by its owner's side, and a record there proves nothing by itself.

Acceptable candidates are ranked by ``(held by this claim first, SLA rank, own namespace first, namespace,
name)``: a claim never trades a service it holds for a better one (no churn), the SLA order is configurable
(default ``L1 > L2 > L3``; an SLA not in the order, or none, ranks last), and ties go to the claim's own
namespace, then by name, so the outcome does not depend on list order. The first is chosen.

Performance: :class:`Index` keeps, for each identity pair, the candidates that have it, so a match
looks only at the candidates whose identity fits; rejection texts are written only for the candidates
shown in the status (``limit``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from pydantic import ValidationError

from opbroker.api.conventions import may_refer
from opbroker.api.errors import field_errors
from opbroker.api.primaza import RegisteredService, ServiceClaim, ServiceState
from opbroker.controller.claims.core import constraints, names
from opbroker.controller.claims.core.views import ServiceView
from opbroker.controller.claims.reasons import Rejection
from opbroker.kubeclient.wire import JsonBody, JsonObject

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
    namespace: str = ""
    share_with: frozenset[str] = frozenset()
    """``spec.shareWith``: the other namespaces that may claim it (``*``: all)."""

    @property
    def service_type(self) -> str | None:
        return next((value for name, value in sorted(self.identity) if name == "type"), None)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def candidate_of(service: ServiceView | JsonObject) -> Candidate:
    """Digest a RegisteredService (a view, or the body as on the wire); an invalid one becomes a candidate with a
    problem."""
    view = service if isinstance(service, ServiceView) else ServiceView.of(service)
    meta = view.meta
    try:
        state = ServiceState(view.state) if view.state else None
    except ValueError:
        state = None
    common = Candidate(
        name=meta.name,
        state=state,
        claimed_by=view.claimed_by,
        deleting=meta.deleting,
        resource_version=meta.resource_version,
        namespace=meta.namespace,
    )
    try:
        model = RegisteredService.model_validate({k: v for k, v in view.wire.items() if k != "status"})
    except ValidationError as exc:
        return replace(common, problem="; ".join(field_errors(exc)))
    spec = model.spec
    return replace(
        common,
        identity=frozenset((item.name, item.value) for item in spec.service_class_identity),
        keys=frozenset(item.name for item in spec.service_endpoint_definition),
        environments=constraints.parse(spec.constraints.environments if spec.constraints else None),
        sla=spec.sla,
        share_with=frozenset(spec.share_with or ()),
    )


@dataclass(frozen=True)
class Request:
    """What a claim asks for."""

    claim: str
    identity: frozenset[IdentityPair]
    keys: tuple[str, ...]
    environment: str
    namespace: str = ""
    """The claim's namespace."""
    namespaces: tuple[str, ...] = ()
    """The other namespaces the claim looks in (``serviceNamespaces``)."""
    recorded: tuple[str, str] | None = None
    """(namespace, name) of the service the claim's ``status.registeredService`` names."""


def request_of(claim: ServiceClaim, recorded: str | None = None) -> Request:
    """What ``claim`` asks for; ``recorded`` is its ``status.registeredService``."""
    spec = claim.spec
    namespace = claim.metadata.namespace or ""
    return Request(
        claim=claim.metadata.name or "",
        identity=frozenset((item.name, item.value) for item in spec.service_class_identity),
        keys=tuple(dict.fromkeys(spec.service_endpoint_definition_keys)),
        environment=spec.environment_tag,
        namespace=namespace,
        namespaces=tuple(dict.fromkeys(n for n in spec.service_namespaces or () if n != namespace)),
        recorded=names.parse_ref(recorded, home=namespace) if recorded else None,
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


def shared_with(namespace: str, service_namespace: str, share_with: Iterable[str]) -> bool:
    """Whether a service of ``service_namespace`` sharing with ``share_with`` may be claimed from ``namespace``."""
    return may_refer(referrer_namespace=namespace, target_namespace=service_namespace, share_with=tuple(share_with))


def visible(request: Request, candidate: Candidate) -> bool:
    """Whether the claim may see ``candidate`` at all (see the module docstring)."""
    if candidate.namespace == request.namespace:
        return True
    return candidate.namespace in request.namespaces and shared_with(
        request.namespace, candidate.namespace, candidate.share_with
    )


def holder_allowed(
    service_namespace: str, share_with: Iterable[str], claim_namespace: str, looks_in: Iterable[str]
) -> bool:
    """Whether a claim of ``claim_namespace`` (looking in ``looks_in``) may still hold a service of
    ``service_namespace`` that shares with ``share_with``: the consent a match needs, kept for as long as the
    hold lasts; withdrawn, the service is free again and the claim loses it."""
    if claim_namespace == service_namespace:
        return True
    return service_namespace in looks_in and shared_with(claim_namespace, service_namespace, share_with)


def ref(request: Request, candidate: Candidate) -> str:
    """How the claim names ``candidate`` (its ``status.registeredService``, its verdicts)."""
    return names.qualified(candidate.namespace, candidate.name, home=request.namespace)


def claimant(request: Request, candidate: Candidate) -> str:
    """What ``candidate``'s ``claimedBy`` says when this claim holds it."""
    return names.qualified(request.namespace, request.claim, home=candidate.namespace)


def held_by(request: Request, candidate: Candidate) -> bool:
    if candidate.claimed_by != claimant(request, candidate):
        return False
    return candidate.namespace == request.namespace or request.recorded == candidate.key


def acceptable(request: Request, candidate: Candidate) -> bool:
    """The fast yes/no of :func:`rejections` (same rules, no texts)."""
    if not visible(request, candidate):
        return False
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
    if not visible(request, candidate):
        return [f"{Rejection.NOT_SHARED}: {candidate.namespace!r} does not share it with {request.namespace!r}"]
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
    """Candidates (one namespace's, or the ones a claim may see), indexed by identity pair. Immutable once built."""

    def __init__(self, candidates: Iterable[Candidate]) -> None:
        self.candidates: tuple[Candidate, ...] = tuple(sorted(candidates, key=lambda c: (c.namespace, c.name)))
        self.namespaces = frozenset(c.namespace for c in self.candidates)
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

    def as_status(self) -> JsonBody:
        return {"name": self.name, "accepted": self.accepted, "reason": self.reason}


@dataclass(frozen=True)
class Match:
    request: Request
    ranked: tuple[Candidate, ...]
    """Acceptable candidates, best first; the first is chosen."""
    index: Index
    """The candidates the claim may see (the only ones judged)."""
    sla_order: SlaOrder = field(default_factory=SlaOrder)
    unshared: tuple[str, ...] = ()
    """The namespaces the claim names that show it no service (none shared with its namespace)."""

    @property
    def chosen(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    @property
    def rejected_count(self) -> int:
        return len(self.index) - len(self.ranked)

    def rejected(self) -> Iterator[Candidate]:
        """The candidates that are not acceptable, by name (computed on demand)."""
        accepted = {c.key for c in self.ranked}
        return (c for c in self.index.candidates if c.key not in accepted)

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
            verdicts.append(Verdict(ref(self.request, candidate), True, reason))
        for candidate in self.rejected():
            if limit is not None and len(verdicts) >= limit:
                break
            verdicts.append(
                Verdict(ref(self.request, candidate), False, "; ".join(rejections(self.request, candidate)))
            )
        return verdicts


def rank_key(request: Request, candidate: Candidate, sla_order: SlaOrder) -> tuple[int, int, int, str, str]:
    return (
        0 if held_by(request, candidate) else 1,
        sla_order.rank(candidate.sla),
        0 if candidate.namespace == request.namespace else 1,
        candidate.namespace,
        candidate.name,
    )


def match(request: Request, candidates: Index | Sequence[Candidate], sla_order: SlaOrder | None = None) -> Match:
    """Judge every candidate the claim may see for ``request``; rank the acceptable ones (see the module
    docstring). Candidates it may not see are dropped first, unnamed."""
    order = sla_order or SlaOrder()
    index = candidates if isinstance(candidates, Index) else Index(candidates)
    if index.namespaces - {request.namespace} and not all(visible(request, c) for c in index.candidates):
        index = Index(c for c in index.candidates if visible(request, c))
    showing = {c.namespace for c in index.candidates}
    unshared = tuple(n for n in request.namespaces if n not in showing)
    accepted = [
        index.candidates[position]
        for position in index.fitting(request.identity)
        if acceptable(request, index.candidates[position])
    ]
    accepted.sort(key=lambda c: rank_key(request, c, order))
    return Match(request=request, ranked=tuple(accepted), index=index, sla_order=order, unshared=unshared)
