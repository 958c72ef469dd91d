"""Issue 42: a seeded tenant fuzzer proves the tenancy model. A tenant with every right in its own namespace (a real
ServiceAccount token, ``tests/tenancy/fuzz/executor.py``) creates, patches — spec, status, labels, annotations —
and deletes every opbroker kind with adversarial values, interleaved with the platform's ordinary OSB and Service
Catalog traffic into a victim's namespace, against the session's real controller, opbroker's broker and the
independent second broker; the invariants of ``tests/tenancy/fuzz/invariants.py`` are checked after every step.

A short run here (a few seeds times N steps, about two minutes); ``python -m bench.tenancy_fuzz --steps 50000`` is
the long one. Environment (both): ``OPBROKER_FUZZ_SEED`` (one seed) or ``OPBROKER_FUZZ_SEEDS`` (comma-separated),
``OPBROKER_FUZZ_STEPS``, ``OPBROKER_FUZZ_PLATFORM_EVERY``, ``OPBROKER_FUZZ_CHECK_EVERY``, ``OPBROKER_FUZZ_ONLY``
(comma-separated families), ``OPBROKER_FUZZ_ALL_FAMILIES=1`` (ignore ``generator.DISABLED``: what the
integrator runs once the fixes land), ``OPBROKER_FUZZ_KEEP_GOING=1`` (record every seed's violation instead of
stopping at the first), ``OPBROKER_FUZZ_REPORT`` (write the figures there as JSON).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from opbroker.devcluster.processes import Process
from tests.brokers.fixture import SecondBroker
from tests.controller_support import DEMO
from tests.tenancy.fuzz.executor import Stack
from tests.tenancy.fuzz.generator import DISABLED
from tests.tenancy.fuzz.runner import Figures, Fuzzer, Options, dump

DEFAULT_SEEDS = (1, 2, 3)
DEFAULT_STEPS = 40


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def options_from_env() -> tuple[list[int], Options]:
    env = os.environ
    seeds = _ints(env.get("OPBROKER_FUZZ_SEED") or env.get("OPBROKER_FUZZ_SEEDS") or "") or list(DEFAULT_SEEDS)
    only = frozenset(p for p in env.get("OPBROKER_FUZZ_ONLY", "").split(",") if p) or None
    options = Options(
        steps=int(env.get("OPBROKER_FUZZ_STEPS", DEFAULT_STEPS)),
        platform_every=int(env.get("OPBROKER_FUZZ_PLATFORM_EVERY", 10)),
        check_every=int(env.get("OPBROKER_FUZZ_CHECK_EVERY", 10)),
        keep_going=env.get("OPBROKER_FUZZ_KEEP_GOING") == "1",
        disabled={} if env.get("OPBROKER_FUZZ_ALL_FAMILIES") == "1" else dict(DISABLED),
        only=only,
        shrink_seconds=float(env.get("OPBROKER_FUZZ_SHRINK_SECONDS", 150)),
    )
    return seeds, options


@pytest.fixture
def stack(
    api_client: client.ApiClient,
    controller: Process,
    controller_metrics_port: int,
    osb_url: tuple[str, str],
    registered: tuple[str, str],
    second_broker: SecondBroker,
) -> Iterator[Stack]:
    docs = list(yaml.safe_load_all((DEMO / "catalog.yaml").read_text()))
    plan = next(d for d in docs if d and d["kind"] == "SFPlan")
    assert controller.popen is not None
    _, suffix = registered
    yield Stack(
        admin=api_client,
        osb_url=osb_url[0],
        osb_password=osb_url[1],
        second_broker=second_broker,
        sc_class=f"second-db-{suffix}",
        demo_service_id=plan["spec"]["serviceId"],
        demo_plan_id=plan["spec"]["id"],
        controller_pid=controller.popen.pid,
        metrics_url=f"http://127.0.0.1:{controller_metrics_port}/metrics",
    )


def test_a_namespace_admin_tenant_changes_nothing_outside_its_namespace(stack: Stack) -> None:
    seeds, options = options_from_env()
    print(f"[fuzz] seeds {seeds}, {options.steps} steps each; disabled families: {options.disabled or 'none'}")
    fuzzer = Fuzzer(stack, options, log=lambda line: print(f"[fuzz] {line}", flush=True))
    try:
        figures: Figures = fuzzer.fuzz(seeds)
    finally:
        fuzzer.close()
    report = os.environ.get("OPBROKER_FUZZ_REPORT")
    if report:
        Path(report).write_text(dump(figures))
    print(f"[fuzz] {dump(figures)}")
    assert figures.steps > 0
    if figures.failures:
        pytest.fail("\n\n".join(f.report(options.steps) for f in figures.failures), pytrace=False)
