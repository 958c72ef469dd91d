"""Operation tokens: the opaque ``operation`` strings returned with 202 and polled via ``last_operation``.

A token says which operation on which object: type, namespace, name, the object's uid and, for an
update, the generation the update produced. Everything ``last_operation`` needs is in the token or on
the object, so any replica answers the same, and the answer survives the object: once an asynchronous
deprovision has finished, the object is gone and the token alone says "succeeded".

``last_operation`` uses a token only to narrow its answer to one operation on the polled object. A value
this broker never issued (``operation=provision``, from a platform that does not echo tokens) and a token
of another object say nothing about this one: the answer is then the object's current operation, as when
``operation`` is absent. A token of an earlier operation on the same object is answered as superseded
(see ``decisions.last_operation``).

Tokens are deterministic (no clock, no randomness): a repeated request, or two replicas racing on the
same request, compute the same token from the same object. They are not secret and carry no authority;
a forged token can only make the broker describe an operation on an object the caller already names.

Pure.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from enum import StrEnum

from opbroker.broker import errors
from opbroker.broker.records import Kind, Record

PREFIX = "op1."


class OperationType(StrEnum):
    """The ``lastOperation.type`` values of the resource model."""

    PROVISION = "provision"
    UPDATE = "update"
    DEPROVISION = "deprovision"
    BIND = "bind"
    UNBIND = "unbind"

    @property
    def kind(self) -> Kind:
        return Kind.BINDING if self in (OperationType.BIND, OperationType.UNBIND) else Kind.INSTANCE

    @property
    def removes(self) -> bool:
        """Whether the operation ends with the object gone (deprovision, unbind)."""
        return self in (OperationType.DEPROVISION, OperationType.UNBIND)


_TYPES = frozenset(OperationType)


@dataclass(frozen=True)
class Token:
    type: OperationType
    namespace: str
    name: str
    uid: str
    generation: int = 0

    @classmethod
    def of(cls, type_: OperationType, record: Record) -> Token:
        """The token for ``type_`` on ``record``; an update is identified by the generation it produced."""
        generation = record.generation if type_ is OperationType.UPDATE else 0
        return cls(type_, record.namespace, record.name, record.uid, generation)

    def encode(self) -> str:
        raw = json.dumps(
            [self.type.value, self.namespace, self.name, self.uid, self.generation], separators=(",", ":")
        ).encode()
        return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def concerns(self, kind: Kind, name: str) -> bool:
        """Whether this token names an operation on the object ``kind``/``name``."""
        return self.type.kind is kind and self.name == name

    @classmethod
    def decode(cls, text: str) -> Token:
        """Parse a token this broker issued; 400 for anything else."""
        bad = errors.bad_request("operation is not an operation token issued by this broker")
        if not text.startswith(PREFIX) or len(text) > 2048:
            raise bad
        encoded = text[len(PREFIX) :]
        try:
            raw = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
        except (binascii.Error, ValueError) as exc:
            raise bad from exc
        if not (isinstance(raw, list) and len(raw) == 5 and all(isinstance(p, str) for p in raw[:4])):
            raise bad
        if not isinstance(raw[4], int) or isinstance(raw[4], bool) or raw[0] not in _TYPES:
            raise bad
        return cls(OperationType(raw[0]), raw[1], raw[2], raw[3], raw[4])


def recognise(text: str | None, kind: Kind, name: str) -> Token | None:
    """The token in an ``operation`` query parameter if it is one of ours for an operation on this object;
    ``None`` for anything else (absent, not issued by this broker, or about another object)."""
    if not text:
        return None
    try:
        token = Token.decode(text)
    except errors.BrokerError:
        return None
    return token if token.concerns(kind, name) else None
