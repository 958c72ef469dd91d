"""Per-instance and per-binding registries, stored as Secrets of JSON values (the Couchbase model).

What goes in them is decided by the renderer (``opbroker.rendering``); this module only reads and writes
the Secret. A registry Secret is owned by its instance or binding, so it goes when they go.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from opbroker.api.conventions import LABEL_MANAGED_BY, MANAGED_BY
from opbroker.controller.kube import Kube
from opbroker.controller.objects import owner_reference


def decode(secret: dict[str, Any] | None) -> dict[str, Any] | None:
    """The registry held by a Secret, or None if there is no Secret yet."""
    if secret is None:
        return None
    values: dict[str, Any] = {}
    for key, encoded in (secret.get("data") or {}).items():
        raw = base64.b64decode(encoded).decode("utf-8")
        try:
            values[key] = json.loads(raw)
        except json.JSONDecodeError:
            values[key] = raw  # written by hand as a plain string: keep it as one
    return values


def encode(values: dict[str, Any]) -> dict[str, str]:
    return {
        key: base64.b64encode(json.dumps(value, sort_keys=True).encode("utf-8")).decode("ascii")
        for key, value in values.items()
    }


def load(kube: Kube, namespace: str, name: str, owner_uid: str | None = None) -> dict[str, Any] | None:
    """The registry, or None if there is none — or if the Secret belongs to an earlier object of the same
    name (an instance deprovisioned and provisioned again before the garbage collector ran): a new
    instance must never inherit the previous one's passwords."""
    secret = kube.read_secret(namespace, name)
    if secret is not None and owner_uid is not None:
        meta = secret.get("metadata") or {}
        owners = {o.get("uid") for o in meta.get("ownerReferences") or []}
        if meta.get("deletionTimestamp") or owner_uid not in owners:
            return None
    return decode(secret)


def save(kube: Kube, *, name: str, owner: dict[str, Any], values: dict[str, Any], labels: dict[str, str]) -> None:
    """Write the registry (server-side apply, so repeating it changes nothing)."""
    kube.apply_secret(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": name,
                "namespace": owner["metadata"]["namespace"],
                "labels": {LABEL_MANAGED_BY: MANAGED_BY, **labels},
                "ownerReferences": [owner_reference(owner)],
            },
            "data": encode(values),
        }
    )


class RegistryCache:
    """The registries this controller wrote or read, kept in memory.

    Only the controller writes registries (templates change them through renders, which it persists), so
    after the first read each reconcile can use the copy instead of a GET. Lost on restart or failover:
    the next read goes to the API again. Only the queue's single worker for an object touches its entry.
    """

    def __init__(self) -> None:
        self._values: dict[tuple[str, str, str], dict[str, Any]] = {}

    def load(self, kube: Kube, namespace: str, name: str, owner_uid: str) -> dict[str, Any] | None:
        key = (namespace, name, owner_uid)
        cached = self._values.get(key)
        if cached is None:
            cached = load(kube, namespace, name, owner_uid)
            if cached is None:
                return None  # nothing of ours yet: ask again next time
            self._values[key] = cached
        return dict(cached)

    def save(
        self, kube: Kube, *, name: str, owner: dict[str, Any], values: dict[str, Any], labels: dict[str, str]
    ) -> None:
        save(kube, name=name, owner=owner, values=values, labels=labels)
        # Not cached: the next read confirms the Secret is really there and ours (an earlier object's
        # Secret still being deleted can swallow this write).
        self.forget(owner["metadata"]["namespace"], name, owner["metadata"]["uid"])

    def forget(self, namespace: str, name: str, owner_uid: str) -> None:
        self._values.pop((namespace, name, owner_uid), None)
