"""The demo operator: reconciles ``Database`` objects (demo.opbroker.io/v1alpha1).

A Database moves to ``Creating``, then after ``spec.readyAfterSeconds`` (default 1 s) to ``Running``,
with a Service (``status.service``: the Database's name where that is a valid Service name, else
``db-<name>``, see :func:`service_name`) and, for every user in ``spec.users``, a Secret
``<database>-<user>-credentials`` holding ``username`` and ``password``. Users removed from the spec
lose their Secret. ``spec.failWith`` makes it ``Failed`` with that message. Everything it creates is
owned by the Database, so deleting the Database cleans up (through the garbage collector).

When the API server refuses what it creates (400/422: the object itself is wrong, and retrying cannot
help), the Database goes ``Failed`` with the API server's message and the operator logs it; anything else
(the API server restarting) is logged and retried every second.

It is deliberately independent of opbroker (plain kubernetes client, no kopf): opbroker drives any
operator through its API alone. Run: ``python examples/demo_operator/operator.py --kubeconfig FILE``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "demo.opbroker.io", "v1alpha1", "databases"
logger = logging.getLogger("demo-operator")
#: A Service name is a DNS-1035 label: it must start with a letter (a Database name, like most Cloud
#: Foundry instance GUIDs, may start with a digit).
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
PERMANENT_REFUSALS = (400, 422)


def service_name(database: str) -> str:
    """The Service of the Database ``database``: its own name if that is a valid Service name, else
    ``db-<name>``, else (too long) ``db-`` and the name's sha224 prefix."""
    for candidate in (database, f"db-{database}"):
        if len(candidate) <= 63 and _DNS_1035_LABEL.match(candidate):
            return candidate
    return "db-" + hashlib.sha224(database.encode()).hexdigest()[:56]


def refusal_message(exc: ApiException) -> str:
    """The API server's explanation of a refusal (its Status message), or the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


class DemoOperator:
    def __init__(self, api: client.ApiClient, workers: int = 8) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.readying: set[tuple[str, str]] = set()  # Databases with a pending move to Running
        # Databases are reconciled concurrently, each one by at most one thread at a time (like any real
        # operator), so the demo operator is not what limits a benchmark.
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="demo-operator")
        self.locks: dict[tuple[str, str], threading.Lock] = {}
        self.locks_guard = threading.Lock()
        # The newest version of each Database seen, and the one last reconciled: a burst of events for one
        # Database is reconciled once, on its newest version, as a work queue would.
        self.latest: dict[tuple[str, str], dict[str, Any]] = {}
        self.handled: dict[tuple[str, str], str] = {}
        # The users whose Secrets this process created, per Database: status.users lags behind them.
        self.created: dict[tuple[str, str], set[str]] = {}

    def submit(self, db: dict[str, Any]) -> None:
        key = (db["metadata"]["namespace"], db["metadata"]["name"])
        with self.locks_guard:
            lock = self.locks.setdefault(key, threading.Lock())
            self.latest[key] = db

        def work() -> None:
            with lock:
                with self.locks_guard:
                    newest = self.latest.get(key)
                    if newest is None:  # deleted meanwhile
                        return
                    version = newest["metadata"]["resourceVersion"]
                    if self.handled.get(key) == version:
                        return
                    self.handled[key] = version
                try:
                    self.reconcile(newest)
                except Exception as exc:
                    logger.warning("reconcile of %s/%s failed: %s", *key, exc)

        self.pool.submit(work)

    def forget(self, key: tuple[str, str]) -> None:
        with self.locks_guard:
            for memory in (self.latest, self.handled, self.created):
                memory.pop(key, None)

    def run(self) -> None:
        resource_version = ""
        while True:
            try:
                if not resource_version:
                    listing = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
                    resource_version = listing["metadata"]["resourceVersion"]
                    for item in listing["items"]:
                        self.submit(item)
                stream = watch.Watch().stream(
                    self.custom.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    PLURAL,
                    resource_version=resource_version,
                    timeout_seconds=60,
                )
                for event in stream:
                    obj = event["object"]
                    resource_version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "DELETED":
                        self.submit(obj)
                    else:
                        self.forget((obj["metadata"]["namespace"], obj["metadata"]["name"]))
            except ApiException as exc:
                if exc.status == 410:
                    resource_version = ""
                else:
                    logger.warning("watch failed: HTTP %s", exc.status)
                    time.sleep(1)
            except Exception as exc:
                logger.warning("watch failed: %s", exc)
                resource_version = ""
                time.sleep(1)

    def reconcile(self, db: dict[str, Any]) -> None:
        meta, spec, status = db["metadata"], db.get("spec") or {}, db.get("status") or {}
        if meta.get("deletionTimestamp"):
            return
        key = (meta["namespace"], meta["name"])
        if spec.get("failWith"):
            if status.get("phase") != "Failed":
                self.set_status(db, {"phase": "Failed", "message": spec["failWith"]})
            return
        phase = status.get("phase")
        # Guarded by the version this event saw: an event processed late (the Database is Running by now)
        # must not move it back.
        if not phase and not self.set_status(db, {"phase": "Creating", "message": "creating"}, guarded=True):
            return
        if phase in (None, "Creating"):
            # Also after a restart of this operator or of the API server: a Database still Creating is
            # always on its way to Running.
            self.schedule_ready(key, float(spec.get("readyAfterSeconds", 1)))
            return
        if phase == "Running":
            self.sync_users(db)

    def schedule_ready(self, key: tuple[str, str], delay: float, *, again: bool = False) -> None:
        """Make the Database Running after ``delay`` (once: a pending one is not scheduled twice)."""
        with self.locks_guard:
            if key in self.readying and not again:
                return
            self.readying.add(key)
        # The timer only hands the work to the pool: API calls stay on the pool's threads (and its
        # connections), however many Databases become ready at once.
        threading.Timer(delay, self.pool.submit, args=(self.become_ready, *key)).start()

    def become_ready(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        try:
            db = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            if (db.get("status") or {}).get("phase") in (None, "Creating"):  # a late event: done already
                service = self.ensure_service(db)
                self.sync_users(db)
                self.set_status(
                    db,
                    {
                        "phase": "Running",
                        "message": "ready",
                        "service": service.metadata.name,
                        "host": service.spec.cluster_ip,
                        "port": 5432,
                    },
                )
        except ApiException as exc:
            if exc.status in PERMANENT_REFUSALS:
                message = refusal_message(exc)
                logger.warning("Database %s/%s failed: %s", namespace, name, message)
                self.fail(namespace, name, message)
            elif exc.status != 404:
                logger.warning("Database %s/%s: HTTP %s %s; retrying in 1 s", namespace, name, exc.status, exc.reason)
                self.schedule_ready(key, 1.0, again=True)
                return
        except Exception as exc:
            logger.warning("Database %s/%s: %s; retrying in 1 s", namespace, name, exc)
            self.schedule_ready(key, 1.0, again=True)  # the API server may be restarting
            return
        with self.locks_guard:
            self.readying.discard(key)

    def fail(self, namespace: str, name: str, message: str) -> None:
        """Mark the Database ``Failed`` with ``message`` (best effort: it may be gone)."""
        try:
            db = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            self.set_status(db, {"phase": "Failed", "message": message})
        except ApiException as exc:
            if exc.status != 404:
                logger.warning("Database %s/%s: cannot record the failure: HTTP %s", namespace, name, exc.status)

    def owner(self, db: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Database",
                "name": db["metadata"]["name"],
                "uid": db["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]

    def ensure_service(self, db: dict[str, Any]) -> Any:
        meta = db["metadata"]
        name = service_name(meta["name"])
        try:
            return self.core.read_namespaced_service(name, meta["namespace"])
        except ApiException as exc:
            if exc.status != 404:
                raise
        body = {
            "metadata": {"name": name, "ownerReferences": self.owner(db)},
            "spec": {"ports": [{"name": "db", "port": 5432}], "selector": {"database": meta["name"]}},
        }
        return self.core.create_namespaced_service(meta["namespace"], body)

    def sync_users(self, db: dict[str, Any]) -> None:
        meta = db["metadata"]
        wanted = set((db.get("spec") or {}).get("users") or {})
        # The users whose Secrets exist are recorded in status.users: no list of the namespace's Secrets
        # (a list costs the API server a scan of every Secret there, for every Database, on every change).
        key = (meta["namespace"], meta["name"])
        with self.locks_guard:
            created = self.created.setdefault(key, set())
        recorded = set((db.get("status") or {}).get("users") or []) | created
        existing = {user: f"{meta['name']}-{user}-credentials" for user in recorded}
        for user in sorted(wanted - set(existing)):
            body = {
                "metadata": {
                    "name": f"{meta['name']}-{user}-credentials",
                    "ownerReferences": self.owner(db),
                    "labels": {"demo.opbroker.io/database": meta["name"], "demo.opbroker.io/user": user},
                },
                "stringData": {"username": user, "password": secrets.token_urlsafe(18)},
            }
            try:
                self.core.create_namespaced_secret(meta["namespace"], body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
            created.add(user)
        for user in sorted(set(existing) - wanted):
            try:
                self.core.delete_namespaced_secret(existing[user], meta["namespace"])
            except ApiException as exc:
                if exc.status != 404:
                    raise
            created.discard(user)
        if (db.get("status") or {}).get("users") != sorted(wanted) and (db.get("status") or {}).get(
            "phase"
        ) == "Running":
            self.set_status(db, {"users": sorted(wanted)})

    def set_status(self, db: dict[str, Any], status: dict[str, Any], *, guarded: bool = False) -> bool:
        """Merge ``status``; False if the Database is gone or (``guarded``) changed since ``db`` was read."""
        meta = db["metadata"]
        body: dict[str, Any] = {"status": status}
        if guarded:
            body["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], body
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
            return False
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s demo-operator %(levelname)s %(message)s")
    configuration = client.Configuration()
    config.load_kube_config(config_file=args.kubeconfig, client_configuration=configuration)
    # Worker threads and readiness timers call the API at once: keep their connections (a pool smaller
    # than that discards connections, and each new one costs a TLS handshake).
    configuration.connection_pool_maxsize = 32
    api = client.ApiClient(configuration)
    api.user_agent = "demo-operator"  # tells its requests apart in audit logs (the benchmarks count them)
    logger.info("watching Databases in %s", configuration.host)  # a terminal (or a walkthrough) sees it started
    DemoOperator(api, workers=16).run()


if __name__ == "__main__":
    main()
