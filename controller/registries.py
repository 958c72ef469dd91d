"""Per-instance and per-binding registries, stored as Secrets of JSON values (the Couchbase model).

What goes in them is decided by the renderer (``opbroker.rendering``); this module only reads and writes
the Secret. A registry Secret is owned by its instance or binding, so it goes when they go.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from opbroker.api.conventions import ANNOTATION_OWNER_UID, LABEL_MANAGED_BY, MANAGED_BY
from opbroker.controller.kube import Kube
from opbroker.controller.objects import owner_reference
from opbroker.controller.reconciler import TemporaryError


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
    if secret is not None and owner_uid is not None and not is_owned_by(secret, owner_uid):
        return None
    return decode(secret)


def is_owned_by(secret: dict[str, Any], owner_uid: str) -> bool:
    """True if the Secret is the live registry of the object with ``owner_uid`` (and of nothing else)."""
    meta = secret.get("metadata") or {}
    owners = {o.get("uid") for o in meta.get("ownerReferences") or []}
    return not meta.get("deletionTimestamp") and owners == {owner_uid}


def clear_the_way(kube: Kube, secret: dict[str, Any], owner_uid: str) -> None:
    """Make room for the registry of ``owner_uid`` where another object's Secret of that name stands.

    Writing into that Secret would be lost: the one of an earlier object of the same name (deprovisioned
    and provisioned again) is deleted by the garbage collector, with whatever we wrote into it. So it is
    deleted now — by uid, so only that Secret — and the caller waits (TemporaryError: retried with
    backoff) until it is gone. A Secret that is not a registry of ours is never touched: that is reported.
    """
    meta = secret.get("metadata") or {}
    name = meta.get("name", "")
    ours = (meta.get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY
    if not ours or not meta.get("ownerReferences"):
        raise TemporaryError(f"Secret {name!r} exists but is not a registry managed by opbroker; rename or delete it")
    if not meta.get("deletionTimestamp"):
        kube.delete_secret(meta.get("namespace", ""), name, uid=meta.get("uid"))
    raise TemporaryError(f"waiting for the registry Secret {name!r} of an earlier object of this name to be deleted")


def save(
    kube: Kube, *, name: str, owner: dict[str, Any], values: dict[str, Any], labels: dict[str, str]
) -> dict[str, Any]:
    """Write the registry (server-side apply, so repeating it changes nothing); the Secret as written."""
    return kube.apply_secret(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": name,
                "namespace": owner["metadata"]["namespace"],
                "labels": {LABEL_MANAGED_BY: MANAGED_BY, **labels},
                "annotations": {ANNOTATION_OWNER_UID: owner["metadata"]["uid"]},
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

    def load(
        self, kube: Kube, namespace: str, name: str, owner_uid: str, *, claim: bool = True
    ) -> dict[str, Any] | None:
        """The registry of ``owner_uid``, or None if it has none yet.

        ``claim``: the caller may write the registry, so a Secret of that name left by an earlier object
        must be gone first (see ``clear_the_way``); without it, such a Secret merely reads as no registry.
        """
        key = (namespace, name, owner_uid)
        cached = self._values.get(key)
        if cached is None:
            secret = kube.read_secret(namespace, name, stored=True)  # registries are written by us alone
            if secret is None:
                return None  # nothing of ours yet: ask again next time
            if not is_owned_by(secret, owner_uid):
                if claim:
                    clear_the_way(kube, secret, owner_uid)
                return None
            cached = decode(secret) or {}
            self._values[key] = cached
        return dict(cached)

    def save(
        self, kube: Kube, *, name: str, owner: dict[str, Any], values: dict[str, Any], labels: dict[str, str]
    ) -> None:
        written = save(kube, name=name, owner=owner, values=values, labels=labels)
        uid = owner["metadata"]["uid"]
        if not is_owned_by(written, uid):
            # The Secret written is not ours alone (an earlier object's, appeared since ``load``): our
            # values are not safe in it. It goes, and the reconcile is repeated once it has.
            self.forget(owner["metadata"]["namespace"], name, uid)
            clear_the_way(kube, written, uid)
        self._values[(owner["metadata"]["namespace"], name, uid)] = dict(values)

    def forget(self, namespace: str, name: str, owner_uid: str) -> None:
        self._values.pop((namespace, name, owner_uid), None)
