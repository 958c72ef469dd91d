"""Carrying out what the core decided: record the request, wait for the controller, build the HTTP reply.

The contract with the controller (see :mod:`opbroker.api.conventions`): a new object gets
``status.state: in_queue``; an update writes the new spec, then ``state: update``; a deprovision/unbind
writes ``state: delete`` and then DELETEs the object (the controller's finalizer tears down). Every
write carries ``status.lastOperation`` with the operation token the client polls.

Bind against deprovision
------------------------
OSB accepts at most one of a bind and a deprovision of the same instance: a deprovision of an instance
with bindings is refused (422 BindingsExist), a bind on an instance being deprovisioned too (422
ConcurrencyError). Each request decides on what it read, so both must also *write* the one object they
share, the instance, with a precondition that fails if the other got there first. No lock is involved:
any number of broker replicas may run, and the API server (etcd) orders all writes to one object.

* Deprovision: read the instance (resourceVersion ``R``), count its bindings (a list, read from etcd
  after that), and if there are none write ``state: delete`` with its ``lastOperation`` — the *mark* —
  on the status, on condition that the instance is still at ``R`` (:meth:`Repository.guarded_status`).
  Lost (the instance changed): read, count and decide again.
* Bind: read the instance (not being deprovisioned, ``lastOperation.id = L``), create the binding, then
  *fence*: patch the instance on condition that ``lastOperation.id`` is still ``L``
  (:func:`records.bind_fence_patch`; the patch always changes the instance). Lost: read the instance
  again; if it is being deprovisioned (or gone, or busy) delete the binding just created and answer 422
  ConcurrencyError, else fence again.

Why never both: the mark and the fence are writes to one object, so one came first. If the fence came
first, it moved the instance's resourceVersion; the mark still succeeded at ``R``, so the deprovision read
``R`` after the fence, hence after the binding was created, and its count, read later still, included the
binding: it would have refused instead of marking. If the mark came first, it changed
``lastOperation.id`` (tokens are never reused, and only the broker writes ``lastOperation``), so the
fence's test failed and the bind withdrew. A tie between the two has one winner, whichever write lands
first; the loser sees it on its re-read. Both are refused only if a third operation interferes (an update
changing the instance under the bind, say) or a request runs out of rounds (422 ConcurrencyError; the
platform repeats it).

What the count counts (:func:`instances.binding_census`): a binding with a ``lastOperation`` (its bind was
recorded, which happens only after its fence succeeded); a binding without one is still being created, so
the deprovision waits (briefly, once) for it to be recorded or withdrawn and reads and counts again — one
still unsettled then counts too; a binding withdrawn before it was recorded (deleting, no
``lastOperation``) does not count: its bind was refused, or it is being unbound anyway. A binding whose
fence preceded the mark is, at the count, recorded or about to be, never withdrawn, so the argument above
stands; waiting instead of refusing at once makes a tie end with one winner rather than two refusals.

Bindings created after the count are exactly those whose fence comes after the mark, so they are all being
withdrawn, like those withdrawn before it; the deprovision waits (bounded) for them all to go before its
DELETE, lest the controller find the instance deleted with bindings and report the deprovision ``failed``
meanwhile. An identical bind that finds a binding not yet recorded waits for it too
(:class:`decisions.Recheck`) rather than answer 202 for a binding that may still be withdrawn.

Cost on the happy path: a bind makes one write more than before (the fence); a deprovision makes none
more (the mark is the status write it always made, now with a precondition) and one list more (the
recount after the mark).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi.responses import JSONResponse

from opbroker.api.osb import OperationState
from opbroker.broker import bindings, decisions, errors, records
from opbroker.broker.decisions import Answer, Credentials
from opbroker.broker.headers import RequestMeta
from opbroker.broker.operations import OperationType, Token
from opbroker.broker.records import Kind, Record
from opbroker.broker.repository import Repository
from opbroker.broker.settings import Settings

log = logging.getLogger("opbroker.broker")

#: Fences a bind tries before giving up with 422 ConcurrencyError (each retry follows a change of the instance
#: by another operation that left it bindable, e.g. an update that finished meanwhile).
FENCE_ATTEMPTS = 3


class Effects:
    def __init__(self, repository: Repository, settings: Settings) -> None:
        self.repository = repository
        self.settings = settings

    # -- recording requests --------------------------------------------------------------------------

    def record_new(self, kind: Kind, manifest: dict[str, Any], operation: OperationType) -> Record | None:
        """Create the object and queue the operation; ``None`` if another request created it first."""
        created = self.repository.create(kind, manifest)
        if created is None:
            return None
        return self._queue(created, operation)

    def _queue(self, created: Record, operation: OperationType) -> Record:
        token = Token.of(operation, created)
        status = records.requested_status(OperationState.IN_QUEUE, operation.value, token.encode(), records.now())
        return self.repository.queue_status(created, status)

    def record_binding(self, instance: Record, manifest: dict[str, Any], instance_id: str) -> Record | None:
        """Create the binding, fence the instance, then queue the bind; ``None`` if another request created
        the binding first. Raises 422 ConcurrencyError (the binding withdrawn) if a deprovision won the race.
        """
        created = self.repository.create(Kind.BINDING, manifest)
        if created is None:
            return None
        seen = instance
        for _ in range(FENCE_ATTEMPTS):
            if self.repository.fence(seen, created):
                return self._queue(created, OperationType.BIND)
            now = self.repository.get(Kind.INSTANCE, instance.namespace, instance.name)
            try:
                bindings.still_bindable(instance_id, instance, now)
            except errors.BrokerError:
                self._withdraw(created)
                raise
            assert now is not None
            seen = now
        self._withdraw(created)
        raise errors.BrokerError(
            errors.Reason.CONCURRENCY_ERROR, f"instance {instance_id!r} keeps changing while binding; repeat"
        )

    def _withdraw(self, binding: Record) -> None:
        """Delete a binding whose bind lost (the controller's finalizer undoes anything it started)."""
        log.info("withdrawing binding %s/%s: its bind lost a race", binding.namespace, binding.name)
        self.repository.delete(binding)

    def record_change(self, record: Record, spec: dict[str, Any], meta: RequestMeta) -> Token:
        patched = self.repository.patch(record, records.spec_patch(record, spec, meta))
        token = Token.of(OperationType.UPDATE, patched)
        status = records.requested_status(
            OperationState.UPDATE, OperationType.UPDATE.value, token.encode(), records.now()
        )
        self.repository.queue_status(patched, status)
        return token

    def record_deprovision(self, instance: Record, meta: RequestMeta) -> Token | None:
        """Mark the instance (guarded), annotate it, wait for bindings withdrawing, DELETE it.

        ``None`` if the instance changed since ``instance`` was read (nothing written: decide again).
        """
        token = Token.of(OperationType.DEPROVISION, instance)
        status = records.requested_status(
            OperationState.DELETE, OperationType.DEPROVISION.value, token.encode(), records.now()
        )
        marked = self.repository.guarded_status(instance, status)
        if marked is None:
            return None
        self.repository.annotate(marked, records.request_annotations(meta))
        withdrawing = self.repository.await_no_bindings(marked, self.settings.withdrawn_bindings_wait)
        if withdrawing:
            log.warning(
                "deprovision %s/%s: %d binding(s) that lost the race to it are still there; deleting anyway",
                marked.namespace,
                marked.name,
                withdrawing,
            )
        self.repository.delete(marked)
        return token

    def record_removal(self, record: Record, operation: OperationType, meta: RequestMeta) -> Token:
        self.repository.annotate(record, records.request_annotations(meta))
        token = Token.of(operation, record)
        status = records.requested_status(OperationState.DELETE, operation.value, token.encode(), records.now())
        self.repository.write_status(record, status)
        self.repository.delete(record)
        return token

    # -- answering -----------------------------------------------------------------------------------

    def settle(self, token: Token, *, created: bool, accepts_incomplete: bool) -> JSONResponse:
        """Wait (bounded) for the controller to finish ``token``'s operation, then answer."""
        record = self.repository.wait(
            token.type.kind,
            token.namespace,
            token.name,
            lambda seen: decisions.finished(token, seen),
            self.settings.sync_timeout,
        )
        outcome = decisions.after_wait(token, record, created=created, accepts_incomplete=accepts_incomplete)
        return self.reply(outcome, record)

    def reply(self, outcome: Answer | Credentials, binding: Record | None = None) -> JSONResponse:
        if isinstance(outcome, Credentials):
            assert binding is not None
            body = self.repository.bind_response(binding)
            if outcome.with_parameters and binding.spec.get("parameters") is not None:
                body = {**body, "parameters": binding.spec["parameters"]}
            return JSONResponse(body, status_code=outcome.status)
        headers = {"Retry-After": str(self.settings.retry_after)} if outcome.pending else None
        return JSONResponse(outcome.body, status_code=outcome.status, headers=headers)

    def conclude(
        self, decision: decisions.Decision, record: Record | None, *, accepts_incomplete: bool
    ) -> JSONResponse:
        """Answer a decision that needs no new write: a reply, a repeat to wait for, or stored credentials."""
        if isinstance(decision, decisions.Wait):
            return self.settle(decision.token, created=False, accepts_incomplete=accepts_incomplete)
        if isinstance(decision, Answer | Credentials):
            return self.reply(decision, record)
        raise TypeError(f"{type(decision).__name__} needs a write; the route must perform it")
