"""What "converged, nothing lost, nothing duplicated" means for the demo plan, checked on the live API.

Given what the platform was told (which instances and bindings exist, which were removed), one snapshot of
a namespace (five list calls) is checked for:

* every live instance ``succeeded`` for its current generation, holding the teardown finalizer exactly
  once, its ``status.resources`` exactly the objects the plan renders (one ``Database``), each existing;
* exactly one ``Database`` per live instance — by name and by owner reference — and its ``users`` exactly
  the owner's plus one per live binding (an unbind leaves no user behind);
* every live binding ``succeeded``, finalizer once, its credentials Secret present and owned by it;
* nothing of a removed instance or binding left, and no object without a live owner: no Database, no
  registry or credentials Secret (opbroker's), no Secret or Service of the operator (owned by a Database).

:func:`violations` is pure (snapshot in, messages out); :func:`snapshot` does the reading.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from opbroker.api.conventions import (
    ANNOTATION_OWNER_UID,
    CREDENTIALS_SECRET_TYPE,
    DEFAULT_NAMESPACE,
    FINALIZER,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    credentials_secret_name,
    instance_registry_name,
)
from opbroker.controller.osb.registries import LABEL_OWNER_NAMESPACE

OSB_GROUP, DEMO_GROUP, VERSION = "osb.servicefabrik.io", "demo.opbroker.io", "v1alpha1"
DATABASE_API = f"{DEMO_GROUP}/{VERSION}"
TERMINAL = frozenset({"succeeded", "failed"})


@dataclass
class Expected:
    """What the platform was told: the live and the removed instances and bindings (Kubernetes names)."""

    live_instances: set[str] = field(default_factory=set)
    gone_instances: set[str] = field(default_factory=set)
    live_bindings: dict[str, str] = field(default_factory=dict)
    """binding name → instance name"""
    gone_bindings: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    """Instances whose fate the platform never learnt (no answer): may exist or not, but consistently."""
    excluded: set[str] = field(default_factory=set)
    """Instances and bindings already reported as wrong by the caller: skipped here, and what they own is
    not counted as orphaned (one fault, one violation)."""


@dataclass(frozen=True)
class Snapshot:
    instances: list[dict[str, Any]]
    bindings: list[dict[str, Any]]
    databases: list[dict[str, Any]]
    secrets: list[dict[str, Any]]
    services: list[dict[str, Any]]
    registries: list[dict[str, Any]] = field(default_factory=list)
    """The namespace's instances' and bindings' registries, kept in the control plane's namespace (issue 29)."""


def snapshot(api: client.ApiClient, namespace: str) -> Snapshot:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)

    def items(group: str, plural: str) -> list[dict[str, Any]]:
        listed: dict[str, Any] = custom.list_namespaced_custom_object(group, VERSION, namespace, plural)
        return list(listed.get("items", []))

    def plain(listed: Any) -> list[dict[str, Any]]:
        return [api.sanitize_for_serialization(item) for item in listed.items]

    return Snapshot(
        instances=items(OSB_GROUP, "sfserviceinstances"),
        bindings=items(OSB_GROUP, "sfservicebindings"),
        databases=items(DEMO_GROUP, "databases"),
        secrets=plain(core.list_namespaced_secret(namespace)),
        services=plain(core.list_namespaced_service(namespace)),
        registries=plain(
            core.list_namespaced_secret(DEFAULT_NAMESPACE, label_selector=f"{LABEL_OWNER_NAMESPACE}={namespace}")
        ),
    )


def binding_user(binding_name: str) -> str:
    """The database user the demo plan's bind template adds for a binding (its ``user`` snippet)."""
    return "u" + hashlib.sha224(binding_name.encode()).hexdigest()[:15]


def _name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _uid(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


def _owner_uids(obj: dict[str, Any]) -> list[str]:
    return [str(ref.get("uid")) for ref in obj["metadata"].get("ownerReferences") or []]


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = obj.get("status") or {}
    return status


def _lifecycle(obj: dict[str, Any], what: str) -> list[str]:
    """A live instance or binding: done for its generation, not deleting, finalizer held exactly once."""
    found = []
    meta, status = obj["metadata"], _status(obj)
    if status.get("state") != "succeeded":
        found.append(f"{what} is {status.get('state')!r}, not 'succeeded' (error: {status.get('error')!r})")
    if status.get("observedGeneration") != meta.get("generation"):
        found.append(
            f"{what} observedGeneration {status.get('observedGeneration')} != generation {meta.get('generation')}"
        )
    if meta.get("deletionTimestamp"):
        found.append(f"{what} is being deleted")
    finalizers = meta.get("finalizers") or []
    if finalizers.count(FINALIZER) != 1:
        found.append(f"{what} holds the finalizer {finalizers.count(FINALIZER)} times: {finalizers}")
    duplicated = sorted(f for f, n in Counter(finalizers).items() if n > 1)
    if duplicated:
        found.append(f"{what} has duplicated finalizers {duplicated}")
    return found


def _describe(obj: dict[str, Any]) -> str:
    meta, status = obj["metadata"], _status(obj)
    return (
        f"state={status.get('state')!r} deleting={bool(meta.get('deletionTimestamp'))} "
        f"finalizers={meta.get('finalizers')} error={status.get('error')!r}"
    )


def violations(expected: Expected, snap: Snapshot, namespace: str) -> list[str]:
    """Every way the namespace differs from a converged, leak-free state (empty: all good)."""
    found: list[str] = []
    instances = {_name(i): i for i in snap.instances}
    bindings = {_name(b): b for b in snap.bindings}
    live_uids = {_uid(i) for n, i in instances.items() if n in expected.live_instances or n in expected.unknown}
    live_uids |= {_uid(b) for n, b in bindings.items() if n in expected.live_bindings}
    live_uids |= {_uid(o) for n, o in [*instances.items(), *bindings.items()] if n in expected.excluded}
    instances = {n: i for n, i in instances.items() if n not in expected.excluded}
    bindings = {n: b for n, b in bindings.items() if n not in expected.excluded}
    databases_by_owner: dict[str, list[str]] = {}
    for database in snap.databases:
        for uid in _owner_uids(database):
            databases_by_owner.setdefault(uid, []).append(_name(database))
    databases = {_name(d): d for d in snap.databases}

    # -- instances ----------------------------------------------------------------------------------------------
    for name, instance in sorted(instances.items()):
        if name in expected.gone_instances:
            found.append(f"instance {name}: deprovisioned, yet it still exists ({_describe(instance)})")
        elif name not in expected.live_instances and name not in expected.unknown:
            found.append(f"instance {name}: exists but the platform never got it accepted ({_describe(instance)})")
    users_wanted: dict[str, set[str]] = {}
    for binding_name, instance_name in expected.live_bindings.items():
        users_wanted.setdefault(instance_name, set()).add(binding_user(binding_name))
    for name in sorted(expected.live_instances | (expected.unknown & set(instances))):
        instance = instances.get(name)
        if instance is None:
            found.append(f"instance {name}: accepted and never deprovisioned, but it does not exist")
            continue
        found += [f"instance {name}: {problem}" for problem in _lifecycle(instance, "the instance")]
        resources = _status(instance).get("resources") or []
        wanted = [{"apiVersion": DATABASE_API, "kind": "Database", "name": name, "namespace": namespace}]
        if sorted(resources, key=str) != wanted:
            found.append(f"instance {name}: status.resources is {resources}, the plan renders {wanted}")
        for ref in resources:
            if ref.get("kind") == "Database" and ref.get("name") not in databases:
                found.append(f"instance {name}: status.resources names Database {ref.get('name')} which does not exist")
        owned = databases_by_owner.get(_uid(instance), [])
        if owned != [name]:
            found.append(f"instance {name}: owns Databases {owned} (by owner reference), expected exactly [{name!r}]")
        database = databases.get(name)
        if database is None:
            found.append(f"instance {name}: its Database does not exist")
            continue
        if _owner_uids(database).count(_uid(instance)) != 1:
            found.append(f"instance {name}: Database {name} has owner references {_owner_uids(database)}")
        users = set((database.get("spec") or {}).get("users") or {})
        want_users = {"main"} | users_wanted.get(name, set())
        if users != want_users:
            found.append(f"instance {name}: Database users {sorted(users)}, expected {sorted(want_users)}")

    # -- bindings -----------------------------------------------------------------------------------------------
    secrets = {_name(s): s for s in snap.secrets}
    for name, binding in sorted(bindings.items()):
        if name in expected.gone_bindings:
            found.append(f"binding {name}: unbound, yet it still exists ({_describe(binding)})")
        elif name not in expected.live_bindings:
            found.append(f"binding {name}: exists but the platform never got it accepted ({_describe(binding)})")
    for name in sorted(expected.live_bindings):
        binding = bindings.get(name)
        if binding is None:
            found.append(f"binding {name}: accepted and never unbound, but it does not exist")
            continue
        found += [f"binding {name}: {problem}" for problem in _lifecycle(binding, "the binding")]
        if _status(binding).get("resources"):  # the demo plan's bind changes only the instance's Database
            found.append(f"binding {name}: status.resources is {_status(binding)['resources']}, expected none")
        secret_name = ((_status(binding).get("response") or {}).get("secretRef")) or ""
        secret = secrets.get(secret_name)
        if secret_name != credentials_secret_name(name) or secret is None:
            found.append(f"binding {name}: credentials Secret {secret_name!r} missing")
        elif secret.get("type") != CREDENTIALS_SECRET_TYPE or _owner_uids(secret) != [_uid(binding)]:
            found.append(
                f"binding {name}: credentials Secret has type {secret.get('type')} owners {_owner_uids(secret)}"
            )

    # -- orphans: anything whose owner is not live -----------------------------------------------------------
    for database in snap.databases:
        if not set(_owner_uids(database)) & live_uids:
            found.append(f"orphan: Database {_name(database)} (owners {_owner_uids(database)} are not live)")
    database_uids = {_uid(d) for d in snap.databases}
    for secret in snap.secrets:
        labels = secret["metadata"].get("labels") or {}
        owners = _owner_uids(secret)
        kind = "credentials" if secret.get("type") == CREDENTIALS_SECRET_TYPE else "registry"
        if labels.get(LABEL_MANAGED_BY) == MANAGED_BY and not set(owners) & live_uids:
            found.append(f"orphan: {kind} Secret {_name(secret)} (owners {owners} are not live)")
        elif labels.get("demo.opbroker.io/database") and not set(owners) & database_uids:
            found.append(f"orphan: operator Secret {_name(secret)} (its Database is gone)")
    for service in snap.services:
        owners = _owner_uids(service)
        if owners and not set(owners) & database_uids:
            found.append(f"orphan: operator Service {_name(service)} (its Database is gone)")
    registry_owners = {(s["metadata"].get("annotations") or {}).get(ANNOTATION_OWNER_UID) for s in snap.registries}
    for registry in snap.registries:
        uid = (registry["metadata"].get("annotations") or {}).get(ANNOTATION_OWNER_UID)
        if uid not in live_uids:
            found.append(f"orphan: registry Secret {_name(registry)} (owner {uid} is not live)")
    for name in sorted(expected.live_instances):
        instance = instances.get(name)
        if instance is not None and _uid(instance) not in registry_owners:
            found.append(f"instance {name}: registry Secret missing")
    for name in sorted(expected.gone_instances):
        gone_registry = any((r["metadata"].get("labels") or {}).get(LABEL_INSTANCE) == name for r in snap.registries)
        if instance_registry_name(name) in secrets or gone_registry or name in databases:
            found.append(f"instance {name}: deprovisioned, but its Database or registry Secret remains")
    return found


def pending_work(api: client.ApiClient, namespace: str) -> dict[str, int]:
    """How many instances and bindings are mid-operation (not terminal, or being deleted) right now."""
    snap_instances = client.CustomObjectsApi(api).list_namespaced_custom_object(
        OSB_GROUP, VERSION, namespace, "sfserviceinstances"
    )["items"]
    snap_bindings = client.CustomObjectsApi(api).list_namespaced_custom_object(
        OSB_GROUP, VERSION, namespace, "sfservicebindings"
    )["items"]

    def busy(objects: list[dict[str, Any]]) -> int:
        return sum(
            1 for o in objects if _status(o).get("state") not in TERMINAL or o["metadata"].get("deletionTimestamp")
        )

    return {"instances": busy(snap_instances), "bindings": busy(snap_bindings)}
