"""The key every check digest is made with: an HMAC, so a digest recorded where a tenant can write is still a fact.

A settled object's check records a digest of what it read (the plan's version, the object's uid and generation, the
versions of the objects read): the same digest later means nothing moved, so nothing is rendered. Recorded in the
object's status (an instance's ``status.checked``, a binding's ``status.sourcesDigest``), it lets a restarted
controller skip the render too. The admission policy keeps tenants from writing a status, but a record must be a fact
wherever it came from (a cluster without the policy, objects restored from another cluster's backup): a plain hash of
what a tenant can read would let it record the digest of objects it changed and keep its change past a restart. Made
with a key only the controller reads (``controller.osb.digest_key`` keeps it in the registries namespace), a digest
the controller did not make matches nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_BYTES = 32
DIGEST_CHARS = 32
"""Hex characters kept of the HMAC-SHA256 (128 bits)."""


class DigestKey:
    """The process's digest key. Random until :meth:`use` gives it the shared one (at start, before any reconcile):
    a digest made with a random key matches only this process's own, so nothing recorded before is trusted."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(KEY_BYTES)

    def use(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a digest key has {KEY_BYTES} bytes, not {len(key)}")
        self._key = key

    def digest(self, payload: bytes) -> str:
        """The keyed digest of ``payload`` (hex, :data:`DIGEST_CHARS` characters)."""
        return hmac.new(self._key, payload, hashlib.sha256).hexdigest()[:DIGEST_CHARS]
