"""Shards: which controller replica handles an instance and its bindings (issue 46).

A platform with more instances than one controller should hold, or one that wants a controller's failure to touch
only part of its tenants, runs ``M`` shards: replica ``i`` holds the Lease of shard ``i`` and watches only the
instances and bindings labelled ``opbroker.io/shard=i``. This module is the rule every party applies the same way —
the broker labelling what it creates, the controller moving what is not where the rule puts it, the assigner
labelling what tenants create themselves — so it is pure and shared (the resource model's layer).

* **Where an object belongs** is :func:`shard_of` its *instance's* namespace and name (a binding follows its
  instance: both compute the same shard without reading each other). Rendezvous hashing (highest random weight):
  changing ``M`` to ``M + 1`` moves only the objects the new shard wins (about ``1/(M+1)`` of them), never one
  between two old shards; the reverse moves only the removed shard's.
* **The label is a fact**: only opbroker's accounts may write a label under ``opbroker.io/`` on opbroker's kinds
  (``opbroker.api.admission``'s ValidatingAdmissionPolicy), so a tenant can neither choose nor change its shard.
  A tenant's object carries no label until the assigner gives it one.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from opbroker.api.conventions import DOMAIN

#: The label naming the shard that handles an instance or binding (a decimal index).
SHARD_LABEL = f"{DOMAIN}/shard"
#: The most shards a control plane may be split into (``--shards``; the ControlPlane's ``controller.shards``): each
#: shard is a Lease, a label value and at least one pod, so a bound keeps a typo from creating thousands.
MAX_SHARDS = 64


def shard_of(namespace: str, instance: str, count: int) -> int:
    """The shard of the instance ``namespace/instance`` (and of its bindings) among ``count`` shards."""
    if count <= 1:
        return 0
    key = f"{namespace}/{instance}".encode()
    return max(range(count), key=lambda shard: _weight(shard, key))


def _weight(shard: int, key: bytes) -> bytes:
    """Shard ``shard``'s draw for ``key``: the largest wins (ties are impossible in practice: 16 bytes)."""
    return hashlib.blake2b(key, digest_size=16, person=b"opbroker-shard", salt=str(shard).encode()[:16]).digest()


def label_of(labels: Mapping[str, object] | None) -> int | None:
    """The shard an object's labels name (None: no label, or a value that is no shard index)."""
    value = (labels or {}).get(SHARD_LABEL)
    if not isinstance(value, str) or not value.isdigit() or len(value) > 3:
        return None
    return int(value)


@dataclass(frozen=True)
class Shards:
    """This replica's place: ``count`` shards, of which it is ``index``. One shard (the default) is one controller
    for everything, exactly as before shards existed: no label selector, the one Lease."""

    count: int = 1
    index: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise ValueError(f"shards must be between 1 and {MAX_SHARDS}, not {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} is not one of the {self.count} shards (0 to {self.count - 1})")

    @property
    def sharded(self) -> bool:
        return self.count > 1

    @property
    def coordinator(self) -> bool:
        """Shard 0 also does what must be done once per control plane (the catalog's status, claims, the Service
        Catalog, the admin API's requests, the assigner)."""
        return self.index == 0

    def lease(self, base: str) -> str:
        """The Lease this replica campaigns for: ``base`` unsharded, else ``<base>-shard-<index>``."""
        return lease_name(base, self.index) if self.sharded else base

    @property
    def selector(self) -> str | None:
        """The label selector of this shard's instances and bindings (None: unsharded, every object)."""
        return f"{SHARD_LABEL}={self.index}" if self.sharded else None

    @property
    def unplaced_selector(self) -> str:
        """Instances and bindings no current shard handles: without the label, or naming a shard beyond ``count``
        (a ``notin`` selector matches objects without the label too)."""
        return f"{SHARD_LABEL} notin ({','.join(str(i) for i in range(self.count))})"

    @property
    def sources_selector(self) -> str | None:
        """The label selector of the objects this shard's source watches follow (None: unsharded, every object):
        everything but what is labelled for another shard — its own instances' rendered objects (stamped with its
        label) and every object no shard stamped (an operator's own Secrets and Services). A ``notin`` selector
        matches objects without the label too."""
        if not self.sharded:
            return None
        return f"{SHARD_LABEL} notin ({','.join(sorted(self._others, key=int))})"

    @functools.cached_property
    def _others(self) -> frozenset[str]:
        """The other shards' label values: what :attr:`sources_selector` leaves out (computed once: :meth:`covers`
        runs on every store write of a followed kind)."""
        return frozenset(str(i) for i in range(self.count) if i != self.index)

    def covers(self, labels: Mapping[str, object] | None) -> bool:
        """Whether an object with ``labels`` is one :attr:`sources_selector` selects (the watch keeps it current)."""
        if not self.sharded:
            return True
        value = (labels or {}).get(SHARD_LABEL)
        return not isinstance(value, str) or value not in self._others

    def other_layout_leases(self, base: str) -> tuple[str, ...]:
        """The Leases of the layout this one may follow or precede, which its leader waits to find free before acting
        and its Role reads: sharded, the unsharded ``base``; unsharded, every Lease a shard of any count may have had
        (up to :data:`MAX_SHARDS`: how many ran before is not known)."""
        return (base,) if self.sharded else tuple(lease_name(base, index) for index in range(MAX_SHARDS))

    def of(self, namespace: str, instance: str) -> int:
        return shard_of(namespace, instance, self.count)

    def label(self, namespace: str, instance: str) -> dict[str, str]:
        """The label an object of the instance ``namespace/instance`` is created with (none unsharded)."""
        return {SHARD_LABEL: str(self.of(namespace, instance))} if self.sharded else {}


def lease_name(base: str, index: int) -> str:
    """The Lease of shard ``index`` (the assigner reads whether another shard's is held)."""
    return f"{base}-shard-{index}"


def index_from_hostname(hostname: str, count: int) -> int:
    """A StatefulSet pod's shard: its ordinal (the trailing ``-<n>`` of its name) modulo ``count``, so ``M * r``
    pods give every shard ``r`` replicas (one leads, the others stand by)."""
    _, dash, ordinal = hostname.rpartition("-")
    if not dash or not ordinal.isdigit():
        raise ValueError(f"the hostname {hostname!r} ends in no StatefulSet ordinal (<name>-<n>)")
    return int(ordinal) % count
