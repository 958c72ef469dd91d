"""The one key type of the controller's work queue.

A key names what is reconciled: its kind (the reconciler that owns it) and the object's namespace and name.
It is a ``NamedTuple`` on purpose: hashable, immutable, cheap, printable as ``instance/ns/name`` in logs,
and unpacked like the tuples every watch handler built by hand before (``kind, namespace, name = key``).
"""

from __future__ import annotations

from typing import NamedTuple

from opbroker.kubeclient.wire import JsonObject, mapping_of


class Key(NamedTuple):
    kind: str
    """Which reconciler owns the key: ``instance``, ``binding``, ``plan``, ``claim``, ``cluster``, ..."""
    namespace: str
    """The object's namespace; empty for cluster-scoped objects and for keys naming a whole namespace's
    worth of work by ``name`` (the claims catalog is keyed by namespace and an empty name)."""
    name: str

    @classmethod
    def of(cls, kind: str, body: JsonObject) -> Key:
        """The key of a wire object (a watch event's body, a read)."""
        meta = mapping_of(body.get("metadata"))
        namespace, name = meta.get("namespace"), meta.get("name")  # built per event: no reader calls
        return cls(kind, namespace if isinstance(namespace, str) else "", name if isinstance(name, str) else "")

    def __str__(self) -> str:
        return "/".join(part for part in (self.kind, self.namespace, self.name) if part)
