"""Claims: matching time for 10 000 registered services x 1 000 claims with the controller's matcher.

Pure (no cluster): the same ``controller.claims.matching`` functions the controller runs, on a seeded
random landscape (20 service types, 5 providers, mixed environment constraints, SLAs and states).
"""

from __future__ import annotations

import random
import time
from typing import Any

from bench.common import summary
from opbroker.api.primaza import ServiceState
from opbroker.controller.claims.core import constraints, matching
from opbroker.controller.claims.core.matching import Candidate, Request, SlaOrder

TYPES = [f"type{i}" for i in range(20)]
PROVIDERS = ["aws", "gcp", "azure", "onprem", "sap"]
ENVIRONMENTS = ["dev", "stage", "prod", "qa"]
KEYS = ["host", "port", "username", "password", "uri", "ca", "database"]


def landscape(services: int, claims: int, seed: int = 42) -> tuple[list[Candidate], list[Request]]:
    rng = random.Random(seed)

    def environments() -> constraints.Environments:
        draw = rng.random()
        if draw < 0.5:
            return constraints.parse(None)
        if draw < 0.75:
            return constraints.parse(["!" + rng.choice(ENVIRONMENTS)])
        return constraints.parse(rng.sample(ENVIRONMENTS, 2))

    candidates = [
        Candidate(
            name=f"svc-{i:05d}",
            identity=frozenset(
                {
                    ("type", rng.choice(TYPES)),
                    ("provider", rng.choice(PROVIDERS)),
                    ("version", str(rng.randint(10, 16))),
                }
            ),
            keys=frozenset(rng.sample(KEYS, rng.randint(3, 7))),
            environments=environments(),
            sla=rng.choice(["L1", "L2", "L3", None, "gold"]),
            state=rng.choices([ServiceState.AVAILABLE, ServiceState.CLAIMED, ServiceState.UNREACHABLE], [8, 1.5, 0.5])[
                0
            ],
            claimed_by=None,
            resource_version="1",
        )
        for i in range(services)
    ]
    requests = [
        Request(
            claim=f"claim-{j}",
            identity=frozenset(
                {("type", rng.choice(TYPES))} | ({("provider", rng.choice(PROVIDERS))} if rng.random() < 0.5 else set())
            ),
            keys=tuple(rng.sample(KEYS, 3)),
            environment=rng.choice(ENVIRONMENTS),
        )
        for j in range(claims)
    ]
    return candidates, requests


def run(services: int = 10_000, claims: int = 1_000) -> dict[str, Any]:
    candidates, requests = landscape(services, claims)
    order = SlaOrder()
    started = time.perf_counter()
    index = matching.Index(candidates)
    index_seconds = time.perf_counter() - started
    per_claim: list[float] = []
    matched = 0
    started = time.perf_counter()
    for request in requests:
        begin = time.perf_counter()
        found = matching.match(request, index, order)
        found.verdicts(50)  # the reasons the claim's status records
        per_claim.append(time.perf_counter() - begin)
        matched += found.chosen is not None
    total = time.perf_counter() - started
    return {
        "services": services,
        "claims": claims,
        "matched": matched,
        "index_build_seconds": round(index_seconds, 4),
        "matching_seconds_total": round(total, 3),
        "per_claim_seconds": summary(per_claim),
        "claims_per_second": round(claims / total, 1),
    }
