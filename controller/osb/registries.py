"""Per-instance and per-binding registries, stored as Secrets of JSON values (the Couchbase model).

What goes in them is decided by the renderer (``opbroker.rendering``); this module only reads, writes, moves and
deletes the Secret.

Where (issue 29): in the control-plane namespace (``--registry-namespace``, default the controller's own), as
the Couchbase broker keeps them in its namespace, because they hold what consumers must not read — an instance's
generated admin password, its CA key. A consumer's rights in its own namespace reach no registry. The Secret is
named by its owner's uid (``opbroker-instance-registry-<uid>``), so an instance deprovisioned and provisioned
again under the same name never meets its predecessor's values; labels name the owner's kind, namespace and
name, and the ``opbroker.io/owner-uid`` annotation its uid.

Cleanup: owner references cannot cross namespaces, so the registry is deleted by the teardown of its instance or
binding (:func:`delete`), and :func:`sweep` deletes those whose owner is gone all the same (a teardown that never
ran: a finalizer removed by hand, an object deleted while no controller ran).

Upgrade: a registry still at its old place (``<name>-registry`` beside the instance, owned through an owner
reference) is moved on first use — written to the new place with the same values, then deleted — so no
generated value changes (:meth:`RegistryCache.load`); :func:`read` (previews) reads either place.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from opbroker.api.conventions import (
    ANNOTATION_OWNER_UID,
    DOMAIN,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    binding_registry_name,
    instance_registry_name,
)
from opbroker.controller.core.views import Meta, SecretView
from opbroker.controller.runtime.kube import Kube
from opbroker.kubeclient.wire import JsonBody, JsonObject

logger = logging.getLogger(__name__)

#: On a registry Secret: whose registry it is (``instance`` or ``binding``), and the owner's namespace; the
#: owner's name is under ``opbroker.io/instance`` or ``opbroker.io/binding``. The sweep lists by the first.
LABEL_REGISTRY_OF = f"{DOMAIN}/registry-of"
LABEL_OWNER_NAMESPACE = f"{DOMAIN}/owner-namespace"
_OWNER_LABEL = {"instance": f"{DOMAIN}/instance", "binding": f"{DOMAIN}/binding"}


@dataclass(frozen=True)
class Place:
    """Where the registry of one instance or binding lives, and where it lived before issue 29."""

    namespace: str
    """The registry namespace (the control plane's)."""
    name: str
    kind: str
    """``instance`` or ``binding``."""
    owner_namespace: str
    owner_name: str
    owner_uid: str

    @property
    def legacy_name(self) -> str:
        """The Secret's name at its old place, in the owner's namespace."""
        if self.kind == "instance":
            return instance_registry_name(self.owner_name)
        return binding_registry_name(self.owner_name)


def place(owner: Meta, *, kind: str, namespace: str) -> Place:
    """The registry place of ``owner`` (an SFServiceInstance's or SFServiceBinding's metadata)."""
    return Place(
        namespace=namespace,
        name=f"opbroker-{kind}-registry-{owner.uid}",
        kind=kind,
        owner_namespace=owner.namespace,
        owner_name=owner.name,
        owner_uid=owner.uid,
    )


def decode(secret: SecretView | None) -> JsonBody | None:
    """The registry (its JSON values) held by a Secret, or None if there is no Secret yet."""
    if secret is None:
        return None
    values: JsonBody = {}
    for key, encoded in secret.data.items():
        raw = base64.b64decode(encoded).decode("utf-8")
        try:
            values[key] = json.loads(raw)
        except json.JSONDecodeError:
            values[key] = raw  # written by hand as a plain string: keep it as one
    return values


def encode(values: JsonObject) -> dict[str, str]:
    return {
        key: base64.b64encode(json.dumps(value, sort_keys=True).encode("utf-8")).decode("ascii")
        for key, value in values.items()
    }


def stamped(secret: SecretView | None, owner_uid: str) -> bool:
    """True if ``secret`` is the live registry (at the new place) of ``owner_uid``."""
    return secret is not None and not secret.meta.deleting and secret.meta.stamped(owner_uid)


def legacy_owned(secret: SecretView | None, owner_uid: str) -> bool:
    """True if ``secret`` is the registry at the old place of ``owner_uid`` (owned by it alone). One of an
    earlier object of the same name is not: the garbage collector deletes it with its owner."""
    if secret is None:
        return False
    meta = secret.meta
    ours = meta.labels.get(LABEL_MANAGED_BY) == MANAGED_BY
    return ours and not meta.deleting and set(meta.owner_uids) == {owner_uid}


def domain_labels(secret: SecretView) -> dict[str, str]:
    """The ``opbroker.io/`` labels of a registry, carried along when it moves."""
    return {k: v for k, v in secret.meta.labels.items() if k.startswith(DOMAIN)}


def read(kube: Kube, where: Place) -> JsonBody | None:
    """The registry, at its place or (not moved yet) its old one; None if there is none. Reads only."""
    secret = SecretView.maybe(kube.read_secret(where.namespace, where.name))
    if stamped(secret, where.owner_uid):
        return decode(secret)
    legacy = SecretView.maybe(kube.read_secret(where.owner_namespace, where.legacy_name))
    return decode(legacy) if legacy_owned(legacy, where.owner_uid) else None


def save(kube: Kube, where: Place, values: JsonObject, labels: dict[str, str]) -> JsonBody:
    """Write the registry (server-side apply, so repeating it changes nothing); the Secret as written."""
    return kube.apply_secret(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": where.name,
                "namespace": where.namespace,
                "labels": {
                    LABEL_MANAGED_BY: MANAGED_BY,
                    **labels,
                    LABEL_REGISTRY_OF: where.kind,
                    LABEL_OWNER_NAMESPACE: where.owner_namespace,
                    _OWNER_LABEL[where.kind]: where.owner_name,
                },
                "annotations": {ANNOTATION_OWNER_UID: where.owner_uid},
            },
            "data": encode(values),
        }
    )


def delete(kube: Kube, where: Place) -> None:
    """Delete the registry with its owner's teardown (nothing if it is gone)."""
    kube.delete_secret(where.namespace, where.name)


def sweep(kube: Kube, namespace: str, owner_uid_of: Callable[[str, str, str], str | None]) -> list[str]:
    """Delete the registries in ``namespace`` whose owner is gone; the names deleted.

    ``owner_uid_of(kind, namespace, name)``: the uid of the live instance or binding (None: there is none). A
    registry whose owner of that name has another uid belongs to an earlier object of the name: it goes too.
    Each delete names the Secret's uid and the resourceVersion listed, so a registry written anew meanwhile
    (re-created, or rewritten for a new owner of the name) is never deleted by mistake.
    """
    deleted = []
    for listed in kube.list_secrets(namespace, label_selector=LABEL_REGISTRY_OF, metadata_only=True):
        meta = Meta.of(listed.get("metadata"))
        kind = meta.labels.get(LABEL_REGISTRY_OF, "")
        owner_name = meta.labels.get(_OWNER_LABEL.get(kind, ""), "")
        owner_namespace = meta.labels.get(LABEL_OWNER_NAMESPACE, "")
        uid = meta.annotations.get(ANNOTATION_OWNER_UID)
        if kind not in _OWNER_LABEL or not owner_name or not owner_namespace or not uid:
            continue  # not one we wrote: left alone
        if owner_uid_of(kind, owner_namespace, owner_name) == uid:
            continue
        if kube.delete_secret(namespace, meta.name, uid=meta.uid or None, resource_version=meta.resource_version):
            logger.info("deleted registry %s/%s: its %s %s/%s is gone", namespace, meta.name, kind,
                        owner_namespace, owner_name)  # fmt: skip
            deleted.append(meta.name)
    return deleted


class RegistryCache:
    """The registries this controller wrote or read, kept in memory.

    Only the controller writes registries (templates change them through renders, which it persists), so
    after the first read each reconcile can use the copy instead of a GET. Lost on restart or failover:
    the next read goes to the API again. Only the queue's single worker for an object touches its entry.
    """

    def __init__(self) -> None:
        self._values: dict[str, JsonBody] = {}

    def load(self, kube: Kube, where: Place, *, legacy: Kube) -> JsonBody | None:
        """The registry of ``where``'s owner, or None if it has none yet.

        ``kube`` reaches the registry namespace (the controller's own rights), ``legacy`` the owner's namespace
        (the rights the owner's plan acts with), where a registry from before issue 29 is moved from: written
        to its place with the same values, then deleted there.
        """
        cached = self._values.get(where.name)
        if cached is None:
            # Written by us alone, labelled with its owner's shard, and moved along with its owner (issue 46): if it
            # exists, this shard's Secret watch follows it.
            secret = SecretView.maybe(kube.read_secret(where.namespace, where.name, stored=True, followed=True))
            if stamped(secret, where.owner_uid):
                cached = decode(secret) or {}
            else:
                cached = self._move(kube, where, legacy)
                if cached is None:
                    return None  # nothing of ours yet: ask again next time
            self._values[where.name] = cached
        return dict(cached)

    @staticmethod
    def _move(kube: Kube, where: Place, legacy: Kube) -> JsonBody | None:
        # Through the store: the Secret watch knows every Secret's name, so a registry never written at the old
        # place (every registry since issue 29) costs no GET — it was one 404 per new instance and binding. Written
        # before shards existed, an old one carries no shard label: every shard's Secret watch follows it.
        old = SecretView.maybe(legacy.read_secret(where.owner_namespace, where.legacy_name, stored=True, followed=True))
        if old is None or not legacy_owned(old, where.owner_uid):
            return None
        values = decode(old) or {}
        save(kube, where, values, domain_labels(old))
        legacy.delete_secret(where.owner_namespace, where.legacy_name, uid=old.meta.uid or None)
        logger.info(
            "moved the registry of %s %s/%s to %s/%s",
            where.kind,
            where.owner_namespace,
            where.owner_name,
            where.namespace,
            where.name,
        )
        return values

    def save(self, kube: Kube, where: Place, values: JsonObject, labels: dict[str, str]) -> None:
        save(kube, where, values, labels)
        self._values[where.name] = dict(values)

    def forget(self, where: Place) -> None:
        self._values.pop(where.name, None)
