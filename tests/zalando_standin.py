"""A tiny stand-in for the Zalando postgres-operator, enough for Service Fabrik's Zalando plan to run.

For every ``postgresql`` (acid.zalan.do/v1) it does what the real operator does that the plan's templates
read: ``status.PostgresClusterStatus`` goes ``Creating`` then ``Running``; a Service named after the cluster
serves port 5432; every user in ``spec.users`` gets a Secret ``<user>.<cluster>.credentials.postgresql
.acid.zalan.do`` with ``username`` and ``password`` (base64, as Secrets hold them); a user removed from the
spec loses its Secret. Everything it creates is owned by the cluster, so deleting the cluster cleans up
through the garbage collector. ``spec.failWith`` makes the cluster ``CreateFailed`` with that reason.

It polls (every 0.2 s) instead of watching: it is a test double, and polling has no reconnect logic to get
wrong. Run: ``python tests/zalando_standin.py --kubeconfig FILE``.
"""

from __future__ import annotations

import argparse
import base64
import logging
import secrets
import time
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

GROUP, VERSION, PLURAL = "acid.zalan.do", "v1", "postgresqls"
CREDENTIALS_SUFFIX = "credentials.postgresql.acid.zalan.do"
LABEL = "application=spilo"
logger = logging.getLogger("zalando-standin")


def secret_name(user: str, cluster: str) -> str:
    return f"{user.replace('_', '-')}.{cluster}.{CREDENTIALS_SUFFIX}"


class StandIn:
    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    def run(self) -> None:
        while True:
            try:
                clusters = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
                for cluster in clusters:
                    if not cluster["metadata"].get("deletionTimestamp"):
                        self.reconcile(cluster)
            except ApiException as exc:
                logger.warning("reconcile failed: HTTP %s %s", exc.status, exc.reason)
            except Exception:
                logger.exception("reconcile failed")
            time.sleep(0.2)

    def owner(self, cluster: dict[str, Any]) -> list[dict[str, Any]]:
        meta = cluster["metadata"]
        return [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "postgresql", "name": meta["name"], "uid": meta["uid"]}]

    def reconcile(self, cluster: dict[str, Any]) -> None:
        meta = cluster["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        spec, status = cluster.get("spec") or {}, cluster.get("status") or {}
        if spec.get("failWith"):
            self.set_status(namespace, name, {"PostgresClusterStatus": "CreateFailed", "reason": spec["failWith"]})
            return
        if not status.get("PostgresClusterStatus"):
            self.set_status(namespace, name, {"PostgresClusterStatus": "Creating"})
            return
        self.ensure_service(cluster)
        self.sync_users(cluster)
        if status.get("PostgresClusterStatus") != "Running":
            self.set_status(namespace, name, {"PostgresClusterStatus": "Running"})

    def set_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, {"status": status})
        logger.info("postgresql %s/%s: %s", namespace, name, status["PostgresClusterStatus"])

    def ensure_service(self, cluster: dict[str, Any]) -> None:
        meta = cluster["metadata"]
        service = {
            "metadata": {
                "name": meta["name"],
                "ownerReferences": self.owner(cluster),
                "labels": {"application": "spilo"},
            },
            "spec": {"ports": [{"name": "postgresql", "port": 5432, "targetPort": 5432}]},
        }
        try:
            self.core.create_namespaced_service(meta["namespace"], service)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def sync_users(self, cluster: dict[str, Any]) -> None:
        meta = cluster["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        users = set((cluster.get("spec") or {}).get("users") or {})
        existing = {
            s.metadata.name
            for s in self.core.list_namespaced_secret(namespace, label_selector=f"{LABEL},cluster-name={name}").items
        }
        wanted = {secret_name(user, name): user for user in users}
        for missing in sorted(set(wanted) - existing):
            user = wanted[missing]
            data = {"username": user, "password": secrets.token_urlsafe(18)}
            secret = {
                "metadata": {
                    "name": missing,
                    "ownerReferences": self.owner(cluster),
                    "labels": {"application": "spilo", "cluster-name": name},
                },
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
            }
            try:
                self.core.create_namespaced_secret(namespace, secret)
                logger.info("postgresql %s/%s: user %s created", namespace, name, user)
            except ApiException as exc:
                if exc.status != 409:
                    raise
        for gone in sorted(existing - set(wanted)):
            self.core.delete_namespaced_secret(gone, namespace)
            logger.info("postgresql %s/%s: secret %s deleted", namespace, name, gone)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    StandIn(config.new_client_from_config(config_file=args.kubeconfig)).run()


if __name__ == "__main__":
    main()
