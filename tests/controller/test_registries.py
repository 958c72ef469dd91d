"""Registries against a real API server (issue 29): kept in the control plane's namespace, named by their
owner's uid, moved from their old place beside the instance without changing a value, swept when orphaned."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from opbroker.api.conventions import LABEL_MANAGED_BY, MANAGED_BY
from opbroker.controller.core.views import Meta
from opbroker.controller.osb import registries, registry_sweep
from opbroker.controller.osb.registries import RegistryCache, encode
from opbroker.controller.runtime.kube import SECRETS, Kube
from opbroker.controller.runtime.objects import owner_reference


def place(owner: dict[str, Any], *, kind: str, namespace: str) -> registries.Place:
    """Where ``owner``'s registry lives (``registries.place`` of its metadata)."""
    return registries.place(Meta.of(owner["metadata"]), kind=kind, namespace=namespace)


def owner(api_client: client.ApiClient, namespace: str, name: str = "inst") -> dict[str, Any]:
    """An owner that exists (a ConfigMap stands in for an instance): an owner reference to nothing would have
    the garbage collector delete the old-place Secret on its own, racing the test."""
    live = client.CoreV1Api(api_client).create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "uid": live.metadata.uid},
    }


def secret(name: str, *, managed: bool, owned_by: dict[str, Any] | None, password: str) -> dict[str, object]:
    metadata: dict[str, object] = {"name": name}
    if managed:
        metadata["labels"] = {LABEL_MANAGED_BY: MANAGED_BY, "opbroker.io/instance": "inst"}
    if owned_by is not None:
        metadata["ownerReferences"] = [owner_reference(owned_by)]
    return {"metadata": metadata, "data": encode({"password": password})}


def side_namespace(api_client: client.ApiClient, namespace: str) -> str:
    """A namespace standing in for the control plane's (the session's own is shared by every test)."""
    name = f"{namespace}-cp"
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": name}})
    return name


def names(api_client: client.ApiClient, namespace: str) -> list[str]:
    return sorted(s.metadata.name for s in client.CoreV1Api(api_client).list_namespaced_secret(namespace).items)


def test_saved_registry_is_kept_in_the_registry_namespace_and_served_without_reading_it_again(
    api_client: client.ApiClient, namespace: str
) -> None:
    cp = side_namespace(api_client, namespace)
    try:
        kube, cache = Kube(api_client), RegistryCache()
        where = place(owner(api_client, namespace), kind="instance", namespace=cp)
        assert cache.load(kube, where, legacy=kube) is None
        cache.save(kube, where, {"password": "p"}, {})
        assert names(api_client, cp) == [where.name] and where.name.endswith(where.owner_uid)
        assert not [n for n in names(api_client, namespace) if n.endswith("registry")], "nothing beside the owner"
        client.CoreV1Api(api_client).delete_namespaced_secret(where.name, cp)
        # The write's answer proved the Secret ours: the copy is served (the deletion above is not seen).
        assert cache.load(kube, where, legacy=kube) == {"password": "p"}
    finally:
        client.CoreV1Api(api_client).delete_namespace(cp)


def test_a_new_owner_costs_no_read_of_the_old_place_when_the_secrets_are_watched(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Issue 31: the Secret watch knows every Secret's name, so looking for a registry at its old place (before
    issue 29) is answered by the store — it was a GET answered 404 for every new instance and binding."""
    cp = side_namespace(api_client, namespace)
    try:
        kube = Kube(api_client)
        kube.store.replace(SECRETS, [], bodies=False)  # what the Secret watch's listing makes of an empty cluster
        reads: list[str] = []
        send = kube.custom.request

        def spy(method: str, path: str, **options: Any) -> Any:  # every request of the door goes through here
            if "/secrets/" in path:
                reads.append(path)
            return send(method, path, **options)

        kube.custom.request = spy  # type: ignore[method-assign]
        where = place(owner(api_client, namespace), kind="instance", namespace=cp)
        assert RegistryCache().load(kube, where, legacy=kube) is None
        assert reads == []
    finally:
        client.CoreV1Api(api_client).delete_namespace(cp)


def test_a_registry_at_its_old_place_is_moved_with_its_values(api_client: client.ApiClient, namespace: str) -> None:
    cp = side_namespace(api_client, namespace)
    try:
        core = client.CoreV1Api(api_client)
        new = owner(api_client, namespace)
        core.create_namespaced_secret(
            namespace, secret("inst-registry", managed=True, owned_by=new, password="generated-before")
        )
        kube = Kube(api_client)
        where = place(new, kind="instance", namespace=cp)
        assert registries.read(kube, where) == {"password": "generated-before"}, "previews read the old place"
        assert RegistryCache().load(kube, where, legacy=kube) == {"password": "generated-before"}
        assert "inst-registry" not in names(api_client, namespace)
        assert RegistryCache().load(kube, where, legacy=kube) == {"password": "generated-before"}
    finally:
        client.CoreV1Api(api_client).delete_namespace(cp)


def test_an_earlier_objects_registry_at_the_old_place_is_not_moved(
    api_client: client.ApiClient, namespace: str
) -> None:
    cp = side_namespace(api_client, namespace)
    try:
        core = client.CoreV1Api(api_client)
        other = owner(api_client, namespace, "another-owner")
        core.create_namespaced_secret(
            namespace, secret("inst-registry", managed=True, owned_by=other, password="the earlier one's")
        )
        core.create_namespaced_secret(namespace, secret("x-registry", managed=False, owned_by=None, password="x"))
        kube = Kube(api_client)
        where = place(owner(api_client, namespace), kind="instance", namespace=cp)
        assert RegistryCache().load(kube, where, legacy=kube) is None
        assert registries.read(kube, where) is None
        assert {"inst-registry", "x-registry"} <= set(names(api_client, namespace)), "neither is touched"
        assert names(api_client, cp) == []
    finally:
        client.CoreV1Api(api_client).delete_namespace(cp)


def test_the_sweep_deletes_registries_whose_owner_is_gone(api_client: client.ApiClient, namespace: str) -> None:
    cp = side_namespace(api_client, namespace)
    try:
        kube = Kube(api_client)
        live, gone = owner(api_client, namespace, "live"), owner(api_client, namespace, "gone")
        kept, orphan = (place(o, kind="instance", namespace=cp) for o in (live, gone))
        for where in (kept, orphan):
            registries.save(kube, where, {"password": "p"}, {})
        core = client.CoreV1Api(api_client)
        core.create_namespaced_secret(cp, {"metadata": {"name": "unrelated"}})
        alive = {("instance", namespace, "live"): live["metadata"]["uid"]}
        assert registries.sweep(kube, cp, lambda *key: alive.get(key)) == [orphan.name]
        assert names(api_client, cp) == sorted([kept.name, "unrelated"])
    finally:
        client.CoreV1Api(api_client).delete_namespace(cp)


def test_the_start_up_housekeeping_moves_every_registry_from_its_old_place(
    api_client: client.ApiClient, namespace: str
) -> None:
    """An upgrade's first pass moves registries of instances that are not reconciled again: the values at the
    new place, the old Secret gone; a credentials-like Secret and an orphan's registry are left to others."""
    cp = side_namespace(api_client, namespace)
    try:
        custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
        body = {
            "apiVersion": "osb.servicefabrik.io/v1alpha1",
            "kind": "SFServiceInstance",
            "metadata": {"name": "inst"},
            "spec": {"instanceId": "inst", "serviceId": "s", "planId": "p"},
        }
        instance = custom.create_namespaced_custom_object(
            "osb.servicefabrik.io", "v1alpha1", namespace, "sfserviceinstances", body
        )
        core.create_namespaced_secret(
            namespace, secret("inst-registry", managed=True, owned_by=instance, password="kept-across-the-upgrade")
        )
        core.create_namespaced_secret(
            namespace, secret("inst-credentials", managed=True, owned_by=instance, password="not a registry")
        )
        kube = Kube(api_client)
        assert registry_sweep.move_legacy(kube, cp, lambda _ns: kube) >= 1
        where = place(instance, kind="instance", namespace=cp)
        assert registries.read(kube, where) == {"password": "kept-across-the-upgrade"}
        assert names(api_client, cp) == [where.name]
        assert set(names(api_client, namespace)) == {"inst-credentials"}
    finally:
        client.CoreV1Api(api_client).delete_namespace(cp)


def test_the_sweep_deletes_no_registry_written_since_it_was_listed(
    api_client: client.ApiClient, namespace: str
) -> None:
    """A registry listed for an owner that is gone, then rewritten (a new owner of the name saved its values
    into the same Secret) before the sweep deletes it: the delete names the version listed and is refused."""
    cp = side_namespace(api_client, namespace)
    try:
        kube = Kube(api_client)
        where = place(owner(api_client, namespace, "reused"), kind="instance", namespace=cp)
        registries.save(kube, where, {"password": "the first owner's"}, {})

        def rewritten_meanwhile(*_key: str) -> str | None:
            registries.save(kube, where, {"password": "written since the listing"}, {"opbroker.io/x": "y"})
            return None  # the owner the listing knew is gone

        assert registries.sweep(kube, cp, rewritten_meanwhile) == []
        assert registries.read(kube, where) == {"password": "written since the listing"}
    finally:
        client.CoreV1Api(api_client).delete_namespace(cp)


def test_the_sweep_learns_its_owners_uids_from_one_listing_per_kind(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Owners are looked up in one metadata-only listing of each kind, made at the first question: no GET per
    registry (thousands of them at a restart), and an owner that is not listed has no uid."""
    custom = client.CustomObjectsApi(api_client)
    uids = {}
    for name in ("a", "b"):
        body = {
            "apiVersion": "osb.servicefabrik.io/v1alpha1",
            "kind": "SFServiceInstance",
            "metadata": {"name": f"listed-{name}"},
            "spec": {"instanceId": f"listed-{name}", "serviceId": "s", "planId": "p"},
        }
        made = custom.create_namespaced_custom_object(
            "osb.servicefabrik.io", "v1alpha1", namespace, "sfserviceinstances", body
        )
        uids[name] = made["metadata"]["uid"]
    kube = Kube(api_client)
    asked: list[str] = []
    request = kube.custom.request

    def recorded(method: str, path: str, **options: Any) -> Any:  # every request of the door goes through here
        asked.append("list" if path.endswith(("/sfserviceinstances", "/sfservicebindings")) else "get")
        return request(method, path, **options)

    kube.custom.request = recorded  # type: ignore[method-assign]
    lookup = registry_sweep.owner_uid_of(kube)
    assert lookup("instance", namespace, "listed-a") == uids["a"]
    assert lookup("instance", namespace, "listed-b") == uids["b"]
    assert lookup("instance", namespace, "never-made") is None
    assert lookup("instance", "another-namespace", "listed-a") is None
    assert asked == ["list"], "one listing of instances, no GET"
    assert lookup("binding", namespace, "listed-a") is None
    assert asked == ["list", "list"], "bindings listed at their first question"
