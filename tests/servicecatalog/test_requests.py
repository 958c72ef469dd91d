"""What the Service Catalog path asks of the API server for one Instance and one Binding, counted from the API
server's own audit log: the real controller process on a control plane of this module's own (audited; the
session's is not), the second broker over HTTP.

The controller watches the four Service Catalog kinds and every Secret (by metadata, bodies fetched once), so
no reconcile needs a GET of them: it reads what the watches keep in its store, and what its own writes
returned (``controller.servicecatalog.resources``). Before, one Instance here cost 32 GETs and one Binding 55.
The writes each needs are asserted too: the ones the protocol asks for, and no more.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from opbroker.api.conventions import DEFAULT_NAMESPACE
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.crds import install_crds
from tests.brokers.fixture import SecondBroker
from tests.cluster_fixtures import onboard
from tests.controller_support import Process, controller_command, wait_for
from tests.servicecatalog_support import auth_secret, create, get, ready, register_broker, renamed

#: The API resources the controller watches that a Service Catalog reconcile reads.
WATCHED = frozenset({"instances", "bindings", "brokers", "serviceclasses", "secrets"})
#: The controller's requests carry this User-Agent (every client it builds).
CONTROLLER_AGENTS = ("opbroker-controller",)

Requests = Counter[tuple[str, str]]

pytestmark = pytest.mark.apiserver


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    """A control plane that logs every request, with opbroker's CRDs and the control plane's namespace."""
    plane = ControlPlane(f"pytest-audit-{os.getpid()}", audit=True)
    plane.up(progress=lambda message: print(f"[audited control plane] {message}"))
    api = config.new_client_from_config(config_file=str(plane.kubeconfig))
    try:
        install_crds(api)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": DEFAULT_NAMESPACE}})
        controller = Process("controller", controller_command(plane), tmp_path_factory.mktemp("audited-logs"))
        controller.start()
        try:
            yield plane, api
        finally:
            controller.stop()
    finally:
        api.close()
        plane.down(progress=lambda message: print(f"[audited control plane] {message}"))


class Audit:
    """The controller's requests in the audit log from a mark on, by (verb, resource[/subresource])."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size

    def since(self) -> Requests:
        found: Requests = Counter()
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            for line in handle:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line still being written
                if event.get("stage") != "ResponseComplete":
                    continue
                if not str(event.get("userAgent", "")).startswith(CONTROLLER_AGENTS):
                    continue
                ref = event.get("objectRef") or {}
                resource = ref.get("resource", "-") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                found[(event.get("verb", "?"), resource)] += 1
        return found

    def settled(self) -> Requests:
        """The requests since the mark once the controller has sent none about the watched kinds for 2 s
        (the reconciles its own last writes' events cause are counted too)."""
        last: list[tuple[int, float]] = [(-1, time.monotonic())]

        def quiet() -> bool:
            seen = sum(n for (verb, resource), n in self.since().items() if resource.split("/")[0] in WATCHED)
            if seen != last[0][0]:
                last[0] = (seen, time.monotonic())
            return time.monotonic() - last[0][1] >= 2.0

        wait_for(quiet, 30, "the controller to settle")
        return self.since()


def gets_of_watched(requests: Requests) -> Requests:
    return Counter({key: n for key, n in requests.items() if key[0] == "get" and key[1].split("/")[0] in WATCHED})


def writes(requests: Requests) -> Requests:
    verbs = {"create", "update", "patch", "delete"}
    return Counter({key: n for key, n in requests.items() if key[0] in verbs and "accessreviews" not in key[1]})


def test_one_instance_and_one_binding_get_nothing_the_controller_watches(
    audited: tuple[ControlPlane, client.ApiClient], second_broker: SecondBroker
) -> None:
    plane, api = audited
    audit = Audit(plane.audit_log)
    suffix = secrets.token_hex(3)
    second_broker.set_catalog(renamed(suffix))
    credentials = {"username": second_broker.username, "password": second_broker.password}
    broker = f"second-{suffix}"
    namespace = f"t-{suffix}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    onboard(api, namespace)
    with auth_secret(api, f"second-auth-{suffix}", credentials) as secret_ref:
        register_broker(api, broker, {"url": second_broker.url, "authInfo": {"basic": {"secretRef": secret_ref}}})
        wait_for(lambda: ready(get(api, "brokers", broker)) == ("True", "FetchedCatalog"), 30, "the broker's catalog")
        audit.settled()

        audit.mark()
        spec = {"serviceClassName": f"second-db-{suffix}", "planName": "async-large"}  # 202, polled
        create(api, namespace, "instances", "Instance", "db", spec)
        wait_for(lambda: ready(get(api, "instances", "db", namespace)) == ("True", "Provisioned"), 60, "provisioned")
        instance = audit.settled()

        audit.mark()
        create(api, namespace, "bindings", "Binding", "db", {"instanceRef": {"name": "db"}})
        wait_for(lambda: ready(get(api, "bindings", "db", namespace)) == ("True", "InjectedBindResult"), 60, "bound")
        binding = audit.settled()

    print("one Instance:", dict(instance), "\none Binding:", dict(binding))
    assert gets_of_watched(instance) == Counter(), "an Instance's reconciles read what the controller watches"
    assert gets_of_watched(binding) == Counter(), "a Binding's reconciles read what the controller watches"
    # What the protocol needs, no more: our finalizer (metadata: a request of its own, the status is a
    # subresource); the id and operation recorded before the request is sent; the broker's operation key after
    # its 202 (polling resumes with it after a crash); the outcome; the event saying so; and for the Binding the
    # credentials Secret. The polls in between write nothing.
    assert writes(instance) == Counter(
        {("patch", "instances"): 1, ("patch", "instances/status"): 3, ("create", "events"): 1}
    )
    assert writes(binding) == Counter(
        {("patch", "bindings"): 1, ("patch", "bindings/status"): 3, ("create", "secrets"): 1, ("create", "events"): 1}
    )
