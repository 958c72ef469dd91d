"""``parametersFrom`` without a control plane: what an Instance is told when its Secret is missing or lacks the key
(a missing Secret is not "no key"), and that a Secret's events queue exactly the Instances and Bindings reading it
(a missing Secret is fixed outside the object: the object must go on by itself once it exists)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from opbroker.api.servicecatalog import Binding, Instance
from opbroker.controller.runtime.clock import FakeClock
from opbroker.controller.runtime.keys import Key
from opbroker.controller.runtime.memory import Memories, Readers
from opbroker.controller.runtime.policies import Policies
from opbroker.controller.servicecatalog.common import Resolver
from opbroker.controller.servicecatalog.core.offering import Unresolved
from opbroker.controller.servicecatalog.core.views import SecretKeyRef
from opbroker.controller.servicecatalog.handlers import ServiceCatalog
from opbroker.controller.servicecatalog.resources import CatalogApi
from tests.fake_kube import FakeKube

NAMESPACE = "team-a"


def secret(name: str, namespace: str = NAMESPACE, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def test_a_missing_secret_is_said_to_be_missing_in_the_objects_namespace_with_the_fix() -> None:
    kube = FakeKube()
    resolver = Resolver(CatalogApi(kube))
    ref = SecretKeyRef(name="db-params", key="params")
    kube.create(secret("db-params", namespace="elsewhere", params='{"version": "16"}'))  # not where it is read

    with pytest.raises(Unresolved) as missing:
        resolver.parameters(NAMESPACE, {}, [ref])
    message = str(missing.value)
    assert "Secret 'db-params' does not exist in namespace team-a" in message
    assert "create it with a key 'params'" in message and "retried" in message
    assert "has no key" not in message

    kube.create(secret("db-params", other='{"hidden": "s3cret"}'))
    with pytest.raises(Unresolved) as keyless:
        resolver.parameters(NAMESPACE, {}, [ref])
    message = str(keyless.value)
    assert "Secret 'db-params' in namespace team-a has no key 'params' (it has: other)" in message
    assert "s3cret" not in message  # key names, never values

    kube.delete_secret(NAMESPACE, "db-params")
    kube.create(secret("db-params", params=json.dumps({"version": "16"})))
    assert resolver.parameters(NAMESPACE, {"size": 1}, [ref]) == {"size": 1, "version": "16"}


def test_readers_keep_every_owner_a_key_reads_and_forget_it() -> None:
    readers: Readers[tuple[str, str]] = Readers()
    a, b = Key("scinstance", NAMESPACE, "a"), Key("scbinding", NAMESPACE, "b")
    readers.link(a, frozenset({(NAMESPACE, "one"), (NAMESPACE, "two")}))
    readers.link(b, frozenset({(NAMESPACE, "two")}))
    assert readers.of((NAMESPACE, "one")) == [a]
    assert readers.of((NAMESPACE, "two")) == [b, a]
    readers.link(a, frozenset({(NAMESPACE, "three")}))  # the spec changed: it reads another Secret now
    assert readers.of((NAMESPACE, "one")) == [] and readers.of((NAMESPACE, "two")) == [b]
    assert readers.of((NAMESPACE, "three")) == [a]
    readers.forget(b)
    assert readers.of((NAMESPACE, "two")) == []


class _Runtime:
    """What ``ServiceCatalog`` uses of the runtime: it records what was queued."""

    def __init__(self) -> None:
        self.memories = Memories()
        self.clock = FakeClock()
        self.policies = Policies(seed=0)
        self.queued: list[Key] = []

    def register(self, _reconciler: object) -> None:
        pass

    def enqueue(self, key: Key) -> None:
        self.queued.append(key)

    def enqueue_threadsafe(self, key: Key) -> None:
        self.queued.append(key)

    def forget(self, key: Key) -> None:
        self.memories.forget(key)


def _object(kind: type[Instance] | type[Binding], name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{kind.GROUP}/{kind.VERSION}",
        "kind": kind.KIND,
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
        "spec": spec,
    }


def test_a_secrets_event_queues_the_instances_and_bindings_whose_parameters_it_holds() -> None:
    runtime = _Runtime()
    catalog = ServiceCatalog(FakeKube(), runtime, control_plane="opbroker", max_operation_seconds=60)  # type: ignore[arg-type]
    params = [{"secretKeyRef": {"name": "db-params", "key": "params"}}]
    catalog.on_instance("ADDED", _object(Instance, "db", {"serviceClassName": "c", "parametersFrom": params}))
    catalog.on_instance("ADDED", _object(Instance, "plain", {"serviceClassName": "c"}))
    catalog.on_binding("ADDED", _object(Binding, "creds", {"instanceRef": {"name": "db"}, "parametersFrom": params}))
    runtime.queued.clear()

    catalog.on_secret(secret("db-params"))
    assert runtime.queued == [Key("scbinding", NAMESPACE, "creds"), Key("scinstance", NAMESPACE, "db")]
    runtime.queued.clear()
    catalog.on_secret(secret("db-params", namespace="elsewhere"))  # same name, another namespace: not read
    catalog.on_secret(secret("unrelated"))
    assert runtime.queued == []

    catalog.on_instance("DELETED", _object(Instance, "db", {"serviceClassName": "c", "parametersFrom": params}))
    runtime.queued.clear()
    catalog.on_secret(secret("db-params"))
    assert runtime.queued == [Key("scbinding", NAMESPACE, "creds")]
