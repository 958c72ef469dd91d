"""Bench suite ``postgresql``: the PostgreSQL example plan (``examples/postgresql-statefulset``) on a fresh
cluster with a node, driven through OSB as tests/realservices/test_postgresql_node.py drives it. Per round
(one instance, one binding), measured from this machine:

* provision → usable credentials: the provision PUT until a login with a fresh binding's credentials worked
  (provision finished + bind finished + first login);
* bind → working login: the bind PUT until the first login with its credentials worked;
* provision (PUT → ``succeeded``), unbind and deprovision alone.

The image comes from the cache (its cold build is recorded in docs/examples.md: it is built once per recipe change).
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from typing import Any

from kubernetes import config

from opbroker.devcluster import postgres_plan
from opbroker.devcluster.devstack import DevStack


def run(rounds: int = 3) -> dict[str, Any]:
    dev = DevStack(f"bench-pg-{os.getpid()}", node=True, broker_port=18932)
    endpoint = dev.up(lambda _m: None)
    measured: dict[str, list[float]] = {
        k: [] for k in ("provision", "provision_to_credentials", "bind_to_login", "unbind", "deprovision")
    }
    try:
        api = config.new_client_from_config(config_file=str(endpoint.kubeconfig))
        started = time.monotonic()
        postgres_plan.install(dev.plane, api, lambda _m: None)
        install_seconds = time.monotonic() - started
        for _ in range(rounds):
            walk = postgres_plan.Walk(endpoint)
            binding = str(uuid.uuid4())
            try:
                t0 = time.monotonic()
                walk.provision()
                t1 = time.monotonic()
                credentials = walk.bind(binding)
                postgres_plan.wait_for_login(credentials)
                t2 = time.monotonic()
                walk.unbind(binding)
                t3 = time.monotonic()
                walk.deprovision()
                t4 = time.monotonic()
            finally:
                walk.close()
            measured["provision"].append(t1 - t0)
            measured["provision_to_credentials"].append(t2 - t0)
            measured["bind_to_login"].append(t2 - t1)
            measured["unbind"].append(t3 - t2)
            measured["deprovision"].append(t4 - t3)
        api.close()
    finally:
        dev.down(lambda _m: None)
    return {
        "rounds": rounds,
        "install_seconds": round(install_seconds, 2),
        "seconds": {k: [round(v, 2) for v in values] for k, values in measured.items()},
        "median": {k: round(statistics.median(values), 2) for k, values in measured.items()},
    }


def markdown(result: dict[str, Any]) -> list[str]:
    m = result["median"]
    return [
        "## PostgreSQL example plan on a node (OSB → credentials that log in)",
        "",
        f"Median of {result['rounds']} rounds: provision → usable credentials {m['provision_to_credentials']} s "
        f"(provision {m['provision']} s), bind → working login {m['bind_to_login']} s, unbind {m['unbind']} s, "
        f"deprovision {m['deprovision']} s; image import and plan install {result['install_seconds']} s.",
        "",
    ]
