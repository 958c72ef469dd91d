"""Issue 25: the controller kept the full JSON of every Secret of the cluster (one list-and-watch fed the store
with them all), so its memory grew with the cluster's Secrets, not with opbroker's objects. Secrets are now
listed and watched by metadata only; the store keeps a version per Secret and the bodies of those the
controller reads or writes, and those bodies go when the Secret moves on."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kubernetes import client

from opbroker.api.conventions import CREDENTIALS_KEY
from opbroker.controller.runtime.sources import SourceIndex, SourceWatchers
from opbroker.controller.runtime.store import UNKNOWN, Census, ObjectStore
from opbroker.devcluster import ControlPlane
from opbroker.devcluster.controlplane import free_ports
from opbroker.kubeclient.informer import Collection
from tests.controller.test_lifecycle import bind, provision, wait_state
from tests.controller_support import Process, controller_command, wait_for
from tests.informer_support import Scripted

SECRETS = ("v1", "Secret")


def secret(name: str, version: str, *, namespace: str = "ns", **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": version},
        **fields,
    }


# -- the store -------------------------------------------------------------------------------------------


def test_a_metadata_listing_holds_versions_not_bodies() -> None:
    store = ObjectStore()
    store.replace(SECRETS, [secret("a", "5", data={"password": "c2VjcmV0"})], bodies=False)
    assert store.lookup(SECRETS, "ns", "a") is UNKNOWN  # exists, body not held: read from the API
    assert store.version_of(SECRETS, "ns", "a") == "5"  # what a bound binding's restart check needs
    assert store.lookup(SECRETS, "ns", "missing") is None  # the listing is complete: absent means absent
    assert store.census() == {SECRETS: Census(objects=1, bodies=0, body_bytes=0)}
    assert "c2VjcmV0" not in repr(store._objects)


def test_a_body_read_is_kept_while_it_is_the_newest_version() -> None:
    store = ObjectStore()
    store.replace(SECRETS, [secret("a", "5")], bodies=False)
    store.fill(SECRETS, secret("a", "5", data={"k": "djE="}))
    assert store.lookup(SECRETS, "ns", "a")["data"] == {"k": "djE="}
    store.note(SECRETS, secret("a", "5"))  # the watch repeats the version held: the body stays
    assert store.lookup(SECRETS, "ns", "a")["data"] == {"k": "djE="}
    store.replace(SECRETS, [secret("a", "5")], bodies=False)  # a relist of the same version keeps it too
    assert store.census()[SECRETS].bodies == 1

    store.note(SECRETS, secret("a", "6"))  # rotated: the old body goes, the next read fetches the new one
    assert store.lookup(SECRETS, "ns", "a") is UNKNOWN
    assert store.version_of(SECRETS, "ns", "a") == "6"
    store.fill(SECRETS, secret("a", "5", data={"k": "b2xk"}))  # a read that raced the rotation is not kept
    assert store.lookup(SECRETS, "ns", "a") is UNKNOWN
    store.fill(SECRETS, secret("gone", "7", data={"k": "eA=="}))  # nor one of a Secret deleted since the read
    assert store.lookup(SECRETS, "ns", "gone") is None


def test_the_controllers_own_writes_hold_their_bodies() -> None:
    store = ObjectStore()
    store.replace(SECRETS, [], bodies=False)
    store.put(SECRETS, secret("registry", "9", data={"k": "dg=="}))  # a write's answer
    store.note(SECRETS, secret("registry", "9"))  # its own watch event
    assert store.lookup(SECRETS, "ns", "registry")["data"] == {"k": "dg=="}
    assert store.census()[SECRETS] == Census(
        objects=1, bodies=1, body_bytes=len(store._objects[(*SECRETS, "ns", "registry")][1] or "")
    )


def run_secret_watch(store: ObjectStore, source: Scripted, own: str) -> None:
    """The Secret watch of the controller (metadata only, its registries in namespace ``ns`` labelled ``own`` with
    bodies) over ``source``'s script, run to the script's end."""
    kube = SimpleNamespace(store=store, served=None, api_client=None)
    watchers = SourceWatchers(
        kube,  # type: ignore[arg-type]
        SourceIndex(),
        lambda _key: None,
        metadata_only=[SECRETS],
        own_bodies={SECRETS: ("ns", own)},
        source=source,
    )
    informer = watchers._informer(SECRETS, "secrets")
    watchers._informers[SECRETS] = informer
    source.informers.append(informer)
    asyncio.run(informer.run())


def test_the_controllers_own_secrets_are_listed_with_their_bodies() -> None:
    """Before the metadata listing, the registries (in the registries' namespace only: a label is anyone's to write,
    issue 42) are listed with their bodies: a restarted controller reads them from memory (no GET each) while the
    listing of every Secret's metadata is on its way, and after it; the rest stays unread."""
    store = ObjectStore()
    seen: dict[str, Any] = {}

    class Looking(Scripted):
        async def page(self, collection: Collection, token: str | None) -> Any:
            if collection.metadata_only:  # the metadata listing starts: the registry's body is held already
                seen.update(during=store.lookup(SECRETS, "ns", "registry"))
            return await super().page(collection, token)

        async def watch(self, collection: Collection, since: str | None, seconds: int) -> Any:
            seen.update(own=store.lookup(SECRETS, "ns", "registry"), other=store.lookup(SECRETS, "ns", "other"))
            return await super().watch(collection, since, seconds)

    own = "opbroker.io/registry-of"
    source = Looking(
        [
            ("list", [secret("registry", "3", data={"k": "cmVn"})]),
            ("list", [{"metadata": secret(n, "3")["metadata"]} for n in ("registry", "other")]),
        ]
    )
    run_secret_watch(store, source, own)
    bodies, listing = source.collections[:2]
    assert listing.metadata_only and (listing.namespace, listing.label_selector) == (None, None)
    assert not bodies.metadata_only and (bodies.namespace, bodies.label_selector) == ("ns", own)
    assert seen["during"]["data"] == {"k": "cmVn"}
    assert seen["own"]["data"] == {"k": "cmVn"}
    assert seen["other"] is UNKNOWN


def test_a_registry_changed_or_deleted_between_its_two_listings_is_not_served_stale() -> None:
    """The registries' bodies are listed before every Secret's metadata: one changed in between is listed by the
    metadata at a newer version (its body is dropped and read again on demand), one deleted in between is not
    listed at all (gone when the kind completes)."""
    store = ObjectStore()
    own = "opbroker.io/registry-of"
    source = Scripted(
        [
            ("list", [secret("changed", "3", data={"k": "b2xk"}), secret("deleted", "3"), secret("kept", "3")]),
            ("list", [{"metadata": secret(n, v)["metadata"]} for n, v in (("changed", "5"), ("kept", "3"))]),
        ]
    )
    run_secret_watch(store, source, own)
    assert store.lookup(SECRETS, "ns", "changed") is UNKNOWN
    assert store.version_of(SECRETS, "ns", "changed") == "5"
    assert store.lookup(SECRETS, "ns", "deleted") is None
    assert store.lookup(SECRETS, "ns", "kept")["metadata"]["resourceVersion"] == "3"


# -- the controller over a cluster with many Secrets not its own -------------------------------------------

UNRELATED = 300  # per phase: listed at the controller's start, then as many arriving through its watch
PAYLOAD = 4096  # bytes of data per unrelated Secret


def store_metrics(port: int) -> dict[tuple[str, ...], float]:
    """The store's Secret figures from the controller's /metrics (none while its endpoint is not up yet)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    found: dict[tuple[str, ...], float] = {}
    for name, labels, value in re.findall(r"^(opbroker_store_\w+)\{([^}]*)\} (\S+)$", text, re.M):
        label = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if (label.get("api_version"), label.get("kind")) == SECRETS:
            found[(name, label.get("held", ""))] = float(value)
    return found


def create_unrelated(core: client.CoreV1Api, namespace: str, prefix: str) -> None:
    payload = base64.b64encode(b"x" * PAYLOAD).decode()
    for i in range(UNRELATED):
        core.create_namespaced_secret(namespace, {"metadata": {"name": f"{prefix}-{i}"}, "data": {"blob": payload}})


def test_unrelated_secrets_stay_out_of_the_controllers_memory(
    api_client: client.ApiClient, namespace: str, control_plane: ControlPlane, controller: Process, tmp_path: Path
) -> None:
    """With hundreds of Secrets nobody references (4 KiB each), the controller's store knows each by its
    version and holds none of their bodies, while the Secrets it needs still flow: its registries and
    credentials Secrets, a plan's source Secret (the binding's credentials) and its rotation."""
    core = client.CoreV1Api(api_client)
    create_unrelated(core, namespace, "listed")
    controller.stop()  # the session's controller has no metrics port: this test runs its own
    (port,) = free_ports(1)
    own = Process("secrets-controller", [*controller_command(control_plane), "--metrics-port", str(port)], tmp_path)
    try:
        own.start()
        wait_for(
            lambda: store_metrics(port).get(("opbroker_store_objects", "metadata"), 0) >= UNRELATED, 60, "the listing"
        )
        create_unrelated(core, namespace, "watched")

        name = f"s{uuid.uuid4().hex[:6]}"
        provision(api_client, namespace, name)
        wait_state(api_client, namespace, "sfserviceinstances", name, "succeeded")
        bind(api_client, namespace, f"{name}-b", name)
        binding = wait_state(api_client, namespace, "sfservicebindings", f"{name}-b", "succeeded")
        secret_name = binding["status"]["response"]["secretRef"]

        def credentials() -> dict[str, Any]:
            data = core.read_namespaced_secret(secret_name, namespace).data[CREDENTIALS_KEY]
            found: dict[str, Any] = json.loads(base64.b64decode(data))["credentials"]
            return found

        old = credentials()
        (source,) = [
            s
            for s in core.list_namespaced_secret(namespace, label_selector=f"demo.opbroker.io/database={name}").items
            if s.metadata.labels.get("demo.opbroker.io/user") == old["username"]
        ]
        rotated = "rotated-" + uuid.uuid4().hex
        core.patch_namespaced_secret(source.metadata.name, namespace, {"stringData": {"password": rotated}})
        wait_for(lambda: credentials()["password"] == rotated, 30, "the credentials Secret to follow the rotation")

        every = len(core.list_namespaced_secret(namespace).items)
        wait_for(
            lambda: sum(v for (n, _), v in store_metrics(port).items() if n == "opbroker_store_objects") >= every,
            30,
            "the watch to deliver every Secret",
        )
        held = store_metrics(port)
        assert held[("opbroker_store_objects", "metadata")] >= 2 * UNRELATED  # each known by its version
        # The bodies held are the few Secrets of the instance and its binding (registries, credentials, the
        # source read for them) — not one of the unrelated ones (the 600 would be 2.4 MB of data alone).
        assert held[("opbroker_store_objects", "body")] <= 8
        assert held[("opbroker_store_body_bytes", "")] < 8 * PAYLOAD
    finally:
        own.stop()
        controller.start()
