"""Which Bindings refer to which Instance: the admission webhook's answer, kept in memory.

The webhook must not list every Binding of the cluster for each DELETE it reviews (that is O(bindings) per
request, and a slow list makes the API server give up and apply ``failurePolicy``). A list-and-watch
(``bindingwatch``) keeps this index instead: per Binding only its name and the Instance it names, and a
reverse map so a review is one dictionary lookup. Pure and thread-safe: fed by the watch (on the loop), read by the
webhook's event loop.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

from opbroker.controller.runtime.concurrency import Event, Lock
from opbroker.kubeclient.wire import JsonObject, mapping_of, path_of, text_of


@dataclass(frozen=True)
class BindingRef:
    """A Binding, reduced to what admission needs: where it is, and the Instance its ``instanceRef`` names
    (a ref without a namespace means the Binding's own)."""

    namespace: str
    name: str
    instance_namespace: str
    instance_name: str

    @classmethod
    def of(cls, binding: JsonObject) -> BindingRef:
        meta = mapping_of(binding.get("metadata"))
        ref = mapping_of(path_of(binding, "spec", "instanceRef"))
        namespace = sys.intern(text_of(meta.get("namespace")) or "")  # namespaces repeat: one copy each
        return cls(
            namespace=namespace,
            name=text_of(meta.get("name")) or "",
            instance_namespace=sys.intern(text_of(ref.get("namespace")) or namespace),
            instance_name=text_of(ref.get("name")) or "",
        )

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def instance(self) -> tuple[str, str]:
        return self.instance_namespace, self.instance_name


class BindingRefs:
    """Every Binding's :class:`BindingRef`, by Binding and by Instance. ``synced`` once a full listing went in:
    before that, an empty answer would mean "not known yet", not "no bindings"."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._by_key: dict[tuple[str, str], BindingRef] = {}
        self._by_instance: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self._synced = Event()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def replace(self, refs: Iterable[BindingRef]) -> None:
        """A full listing: what it does not hold is gone."""
        with self._lock:
            self._by_key.clear()
            self._by_instance.clear()
            for ref in refs:
                self._put(ref)
        self._synced.set()

    def put(self, ref: BindingRef) -> None:
        with self._lock:
            self._remove(ref.key)
            self._put(ref)

    def remove(self, namespace: str, name: str) -> None:
        with self._lock:
            self._remove((namespace, name))

    def referring_to(self, namespace: str, name: str) -> list[BindingRef]:
        """The Bindings whose ``instanceRef`` names Instance ``namespace/name`` (sorted by namespace, name)."""
        with self._lock:
            keys = sorted(self._by_instance.get((namespace, name), ()))
            return [self._by_key[key] for key in keys]

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_key)

    def _put(self, ref: BindingRef) -> None:
        self._by_key[ref.key] = ref
        self._by_instance.setdefault(ref.instance, set()).add(ref.key)

    def _remove(self, key: tuple[str, str]) -> None:
        old = self._by_key.pop(key, None)
        if old is None:
            return
        holders = self._by_instance.get(old.instance)
        if holders is not None:
            holders.discard(key)
            if not holders:
                del self._by_instance[old.instance]
