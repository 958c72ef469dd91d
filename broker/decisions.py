"""What the broker does with a request, given the stored object: the shared vocabulary and the polling rules.

A decision is one of: :class:`Answer` (reply now), :class:`Create` / :class:`Change` / :class:`Remove`
(record the request, then reply 202 or wait for the controller), :class:`Wait` (a repeated synchronous
request: wait like the first one did), :class:`Recheck` (another request is still recording the object:
wait for it to settle, then decide again) or :class:`Credentials` (reply with the bind response from its
Secret). :mod:`opbroker.broker.instances` and :mod:`opbroker.broker.bindings` decide requests;
this module holds what both share: state tests, attribute comparison, ``last_operation`` and the answer
after a synchronous wait.

Pure: every function takes plain data (:class:`Record`, tokens, flags) and returns a decision or raises
:class:`errors.BrokerError`. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opbroker.api.osb import OperationState
from opbroker.broker import bodies, errors
from opbroker.broker.operations import OperationType, Token
from opbroker.broker.records import Kind, Record, canonical

#: States in which an operation is under way (``None``: created, status not written yet).
PENDING_STATES = frozenset(
    {
        None,
        OperationState.IN_QUEUE.value,
        OperationState.UPDATE.value,
        OperationState.DELETE.value,
        OperationState.IN_PROGRESS.value,
    }
)
SUCCEEDED = OperationState.SUCCEEDED.value
FAILED = OperationState.FAILED.value


@dataclass(frozen=True)
class Answer:
    """Reply now. ``pending``: an operation is still running, so the reply carries ``Retry-After``."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    pending: bool = False


@dataclass(frozen=True)
class Create:
    """Record a new instance or binding; reply 202 when ``asynchronous``, else wait for the outcome."""

    asynchronous: bool


@dataclass(frozen=True)
class Change:
    """Record an update (the new spec, wire form); reply 202 when ``asynchronous``, else wait."""

    spec: dict[str, Any]
    asynchronous: bool


@dataclass(frozen=True)
class Remove:
    """Mark the object ``delete`` and delete it (the controller's finalizer tears down); 202 or wait."""

    asynchronous: bool


@dataclass(frozen=True)
class Wait:
    """A repeat of a synchronous request still under way: wait for ``token``'s outcome, then answer."""

    token: Token


@dataclass(frozen=True)
class Credentials:
    """Reply ``status`` with the bind response the controller stored (and the parameters when fetched)."""

    status: int
    with_parameters: bool = False


@dataclass(frozen=True)
class Recheck:
    """The object exists but its creator has not recorded the request yet and may still withdraw it (a bind
    between creating its binding and queueing it, see :mod:`opbroker.broker.effects`): wait briefly until it
    is recorded or withdrawn, then decide again."""


Decision = Answer | Create | Change | Remove | Wait | Recheck | Credentials


def settled(uid: str, record: Record | None) -> bool:
    """Whether the object a :class:`Recheck` waits on was recorded (has a ``lastOperation``) or withdrawn."""
    return record is None or record.uid != uid or record.deleting or record.operation_type is not None


# -- facts about a record ------------------------------------------------------------------------------


def is_pending(record: Record) -> bool:
    return record.state in PENDING_STATES


def is_removing(record: Record) -> bool:
    """Deleted, or marked for removal: ``state: delete`` or a deprovision/unbind as the last operation.

    ``lastOperation`` is written only by the broker, so once a deprovision has marked an instance the mark
    stays even if the controller moves ``state`` on before the broker's DELETE arrives.
    """
    return (
        record.deleting
        or record.state == OperationState.DELETE.value
        or record.operation_type in (OperationType.DEPROVISION.value, OperationType.UNBIND.value)
    )


def last_type(record: Record) -> OperationType:
    """The type of the record's latest operation (a fresh object without status: its creation)."""
    if record.operation_type in set(OperationType):
        return OperationType(record.operation_type)
    return OperationType.PROVISION if record.kind is Kind.INSTANCE else OperationType.BIND


def _normal(key: str, value: Any) -> Any:
    if key == "maintenance_info":
        return (value or {}).get("version")
    if key in ("context", "parameters", "bindResource"):
        return value or {}
    return value


def differing(stored: Mapping[str, Any], wanted: Mapping[str, Any], keys: Iterable[str]) -> list[str]:
    """The attributes (wire names) in which two specs differ; ``None`` and ``{}`` count as the same."""
    return [key for key in keys if canonical(_normal(key, stored.get(key))) != canonical(_normal(key, wanted.get(key)))]


def failure(record: Record, operation: OperationType) -> errors.BrokerError:
    """The error for an operation the controller reported failed (5xx: the platform mitigates orphans)."""
    description = record.error or record.description or f"the {operation.value} operation failed"
    usable = record.instance_usable if operation in (OperationType.UPDATE, OperationType.DEPROVISION) else None
    repeatable = record.update_repeatable if operation is OperationType.UPDATE else None
    return errors.BrokerError(errors.Reason.OPERATION_FAILED, description, usable, repeatable)


def accepted(token: Token, body: bodies.ProvisionBody | bodies.OperationBody | None = None) -> Answer:
    """202 with the operation token (and whatever else the body carries)."""
    payload = body.wire() if body is not None else {}
    payload["operation"] = token.encode()
    return Answer(202, payload, pending=True)


# -- waiting and polling -------------------------------------------------------------------------------


def finished(token: Token, record: Record | None) -> bool:
    """Whether the operation ``token`` names has an outcome (the wait predicate of synchronous requests)."""
    if record is None or record.uid != token.uid:
        return True
    if record.state == FAILED:
        return True
    if record.state != SUCCEEDED:
        return False
    if token.type.removes:
        return True
    caught_up = record.observed_generation is None or record.observed_generation >= token.generation
    return caught_up and record.operation_id in (None, token.encode())


def after_wait(token: Token, record: Record | None, *, created: bool, accepts_incomplete: bool) -> Answer | Credentials:
    """The answer to a synchronous request once the wait is over (outcome reached, or time ran out)."""
    gone = record is None or record.uid != token.uid
    if token.type.removes and gone:
        return Answer(200, {})
    if gone:
        raise errors.BrokerError(
            errors.Reason.OPERATION_FAILED, f"the {token.type.value} was cancelled: the object was deleted meanwhile"
        )
    assert record is not None
    if finished(token, record):
        if record.state == FAILED:
            raise failure(record, token.type)
        if token.type is OperationType.PROVISION:
            return Answer(201 if created else 200, bodies.ProvisionBody(dashboard_url=record.dashboard_url).wire())
        if token.type is OperationType.UPDATE:
            return Answer(200, bodies.ProvisionBody(dashboard_url=record.dashboard_url).wire())
        if token.type is OperationType.BIND:
            return Credentials(201 if created else 200)
        return Answer(200, {})
    if accepts_incomplete:
        body = bodies.ProvisionBody(dashboard_url=record.dashboard_url) if token.type.kind is Kind.INSTANCE else None
        return accepted(token, body)
    raise errors.BrokerError(
        errors.Reason.OPERATION_TIMEOUT,
        f"the {token.type.value} did not finish in time; it goes on, and a repeated request or a DELETE "
        "(orphan mitigation) is safe",
    )


def last_operation(kind: Kind, name: str, token: Token | None, record: Record | None) -> Answer:
    """The ``last_operation`` answer for the object ``name`` (optionally for the operation ``token``).

    Stateless: decided from the token and the object alone. A finished deprovision/unbind (object gone)
    keeps answering ``succeeded``; with no token and no object the answer is 410 Gone. A token of another
    object is no token for this one: the object's current operation is answered.
    """
    if token is not None and not token.concerns(kind, name):
        token = None
    if record is None or (token is not None and record.uid != token.uid):
        if token is None:
            raise errors.BrokerError(errors.Reason.GONE, f"the {kind.value} does not exist")
        if token.type.removes:
            return _state("succeeded")
        what = "no longer exists" if record is None else "was deleted and created again"
        return _state("failed", f"the {kind.value} {what}; the {token.type.value} did not complete")
    operation = token.type if token is not None else last_type(record)
    if token is not None and record.operation_id not in (None, token.encode()):
        return _superseded(token, record)
    if record.deleting and not operation.removes:
        return _state("in progress", record.description, pending=True)
    if record.state == FAILED:
        usable = record.instance_usable if operation in (OperationType.UPDATE, OperationType.DEPROVISION) else None
        repeatable = record.update_repeatable if operation is OperationType.UPDATE else None
        return _state("failed", record.error or record.description, usable, repeatable)
    if record.state == SUCCEEDED and (operation.removes or token is None or finished(token, record)):
        return _state("succeeded", record.description)
    return _state("in progress", record.description, pending=True)


def _superseded(token: Token, record: Record) -> Answer:
    later = last_type(record)
    if token.type is OperationType.PROVISION and later is OperationType.UPDATE:
        return _state("succeeded", "provisioned; a later update has been requested since")
    return _state("failed", f"superseded by a later {later.value} operation; poll that one instead")


def _state(
    state: str,
    description: str | None = None,
    instance_usable: bool | None = None,
    update_repeatable: bool | None = None,
    *,
    pending: bool = False,
) -> Answer:
    body = bodies.LastOperationBody.model_validate(
        {
            "state": state,
            "description": description or None,
            "instance_usable": instance_usable,
            "update_repeatable": update_repeatable,
        }
    )
    return Answer(200, body.wire(), pending=pending)
