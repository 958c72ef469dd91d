"""Carrying out what the core decided: record the request, wait for the controller, build the HTTP reply.

The contract with the controller (see :mod:`opbroker.api.conventions`): a new object gets
``status.state: in_queue``; an update writes the new spec, then ``state: update``; a deprovision/unbind
writes ``state: delete`` and then DELETEs the object (the controller's finalizer tears down). Every
write carries ``status.lastOperation`` with the operation token the client polls.

Bind against deprovision
------------------------
OSB accepts at most one of a bind and a deprovision of the same instance: a deprovision of an instance
with bindings is refused (422 BindingsExist), a bind on an instance being deprovisioned too (422
ConcurrencyError). Each request decides on what it read; no lock is involved (any number of broker replicas
may run). What makes them see each other is the API server: etcd orders all writes, and a GET or list
without ``resourceVersion`` is linearizable (it sees every write that completed before it began). Binds are
the hot path and deprovisions rare, so a bind writes nothing beyond its binding and the deprovision does
the extra work.

* Bind: (B0) read the instance: not being deprovisioned; (B1) create the binding, without
  ``lastOperation``; (B2) read the instance again: marked by a deprovision, deleted, gone or otherwise no
  longer bindable (:func:`bindings.still_bindable`) → delete the binding — *withdraw* it — and answer 422
  ConcurrencyError; else (B3) queue the bind (``in_queue`` with its ``lastOperation``: the binding is
  *recorded*). A binding is recorded only if its B2 saw no mark; a withdrawn one never is.
* Deprovision: (D1) read the instance (resourceVersion ``R``) and list its bindings: a recorded one refuses
  it (422 BindingsExist); one neither recorded nor withdrawn makes it wait (briefly, once) for that to
  settle, then start again. (D2) Write ``state: delete`` and the deprovision's ``lastOperation`` — the
  *mark* — on condition that the instance is still at ``R`` (:meth:`Repository.guarded_status`; lost:
  start again). (D3) List the bindings again, and wait (bounded) for those not yet settled to be recorded
  or withdrawn. All withdrawn (or none): annotate the instance, wait (bounded) for the withdrawn bindings
  to go (lest the controller find the instance deleted with bindings and report the deprovision
  ``failed`` meanwhile), DELETE it. Any recorded: *unmark* the instance (below) and answer 422
  BindingsExist; any still unsettled at the deadline: unmark and answer 422 ConcurrencyError.

Why never both. A bind answers 202 only if its B2 saw no mark: B2 read before D2 wrote, and B1 completed
before B2 began, so D3, listed after D2, lists the binding (the bind did not withdraw it; an unbind would
have recorded it first), and it is recorded or about to be: the deprovision waits for it, then unmarks and
refuses. A deprovision goes on only if every binding D3 listed was withdrawn. A binding created after that
list has B2 after D3, so after D2: it sees the mark, which stays until the DELETE (this deprovision does
not unmark, and nobody else undoes it, see below), and withdraws. A binding created between D1 and D2 is
listed at D3, like every binding created before the list: recorded if its B2 preceded the mark (the
deprovision refuses), withdrawn if not; one created before D1 was listed at D1 already. Both are refused
when a bind's B2 sees a mark that is then undone, or a request runs out of rounds or patience (the
platform repeats it).

Unmarking puts back what the mark replaced (:func:`records.unmarked_status`), with a status write guarded
by the instance's resourceVersion. Unchanged since the mark, the instance gets its status back exactly.
Changed (a controller status write, another request): it is read again, and undone only if it still
carries this mark's ``lastOperation`` — unique to the request, its ``startedAt`` being
:func:`records.instant` (the operation token is the same for every deprovision of the instance) — then only
the fields still holding the mark's values (a ``state`` the controller moved on is kept), guarded again.
Deleted, gone or carrying another ``lastOperation``, it is not this request's to undo: a deprovision that
marked over this mark decides for itself, and may have been accepted. So an accepted deprovision's mark is
never undone: its own request does not unmark, and a mark written over it is undone back to it. A mark the
request cannot undo (the instance keeps changing) stays, logged: binds are refused until the next
deprovision carries it through. Nothing else needs undoing: the controller acts on a deprovision only once
the instance is deleted, never on ``state: delete`` (:func:`opbroker.controller.core.decisions.next_instance_step`).
Other requests refuse a marked instance; one gap, older than this scheme: an update whose spec patch came
before the mark and whose status write after it writes its ``lastOperation`` over the mark's
(:meth:`Repository.queue_status` falls back to an unguarded write), leaving ``state: delete`` as the mark.

What the count counts (:func:`instances.binding_census`): a recorded binding blocks (one being unbound
too); a withdrawn one (deleting, no ``lastOperation``) does not; an unsettled one is waited for. An
identical bind that finds a binding not yet recorded waits for it too (:class:`decisions.Recheck`) rather
than answer 202 for a binding that may still be withdrawn.

Cost. A bind makes one read (B2) besides creating and queueing its binding, and no write to the instance:
its resourceVersion stays, so binds neither fail the controller's guarded status writes on the instance
nor wake the instance's watchers. A deprovision makes no request more than before on the happy path (the
list after the mark, D3, is the one that looked for withdrawn bindings before the DELETE); in a race, the
waits for unsettled bindings with a list after them, and the unmark (a status write; a read and a write
per retry).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi.responses import JSONResponse

from opbroker.api.osb import OperationState
from opbroker.broker import bindings, decisions, errors, instances, records
from opbroker.broker.decisions import Answer, Credentials
from opbroker.broker.headers import RequestMeta
from opbroker.broker.operations import OperationType, Token
from opbroker.broker.records import Kind, Record
from opbroker.broker.repository import Repository
from opbroker.broker.settings import Settings

log = logging.getLogger("opbroker.broker")

#: How long a request waits for a binding another request is creating to be recorded or withdrawn (its bind
#: has two API calls left to make).
RECHECK_SECONDS = 2.0
#: Guarded writes an unmark tries (each retry follows another write to the instance, see above).
UNMARK_ATTEMPTS = 3


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
        """Create the binding, read the instance again, queue the bind; ``None`` if another request created the
        binding first. Raises 422 ConcurrencyError (the binding withdrawn) if the instance is now marked by a
        deprovision (or otherwise no longer bindable).
        """
        created = self.repository.create(Kind.BINDING, manifest)
        if created is None:
            return None
        now = self.repository.get(Kind.INSTANCE, instance.namespace, instance.name)
        try:
            bindings.still_bindable(instance_id, instance, now)
        except errors.BrokerError:
            self._withdraw(created)
            raise
        return self._queue(created, OperationType.BIND)

    def _withdraw(self, binding: Record) -> None:
        """Delete a binding whose bind lost (the controller's finalizer undoes anything it started)."""
        log.info("withdrawing binding %s/%s: its bind lost a race", binding.namespace, binding.name)
        self.repository.delete(binding)

    def record_change(self, record: Record, spec: dict[str, Any], meta: RequestMeta) -> Token | None:
        """Write the new spec (guarded by the version the update was decided on), then queue the update.

        ``None`` if the instance changed since ``record`` was read (nothing written: decide again). A change of
        status only — the controller reporting what the operator says — is the common one: deciding again on the
        new read answers the client as if the request had come a moment later, instead of failing it.
        """
        patched = self.repository.guarded_patch(record, records.spec_patch(record, spec, meta))
        if patched is None:
            return None
        token = Token.of(OperationType.UPDATE, patched)
        status = records.requested_status(
            OperationState.UPDATE, OperationType.UPDATE.value, token.encode(), records.now()
        )
        self.repository.queue_status(patched, status)
        return token

    def record_deprovision(self, instance: Record, meta: RequestMeta, instance_id: str) -> Token | None:
        """Mark the instance (guarded), count its bindings again: none but withdrawn ones → annotate, wait for
        those to go, DELETE; else unmark it and raise 422 BindingsExist (or ConcurrencyError, undecided).

        ``None`` if the instance changed since ``instance`` was read (nothing written: decide again).
        """
        token = Token.of(OperationType.DEPROVISION, instance)
        mark = records.requested_status(
            OperationState.DELETE, OperationType.DEPROVISION.value, token.encode(), records.instant()
        )
        marked = self.repository.guarded_status(instance, mark)
        if marked is None:
            return None
        listed = self.repository.bindings_of(marked)
        blocking, unsettled = instances.binding_census(listed)
        if unsettled and not blocking:
            self.repository.await_settled(unsettled, RECHECK_SECONDS)
            listed = self.repository.bindings_of(marked)
            blocking, unsettled = instances.binding_census(listed)
        if blocking or unsettled:
            self._unmark(instance, mark, marked)
            if blocking:
                raise errors.BrokerError(
                    errors.Reason.BINDINGS_EXIST,
                    f"instance {instance_id!r} still has {blocking} binding(s); unbind them first",
                )
            raise errors.BrokerError(
                errors.Reason.CONCURRENCY_ERROR, f"instance {instance_id!r} is being bound; repeat the deprovision"
            )
        self.repository.annotate(marked, records.request_annotations(meta))
        if listed:  # withdrawn bindings, still held by the controller's finalizer
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

    def _unmark(self, before: Record, mark: dict[str, Any], marked: Record) -> None:
        """Put back what ``mark`` replaced on the instance, unless it is no longer this request's mark."""
        now: Record | None = marked
        for _ in range(UNMARK_ATTEMPTS):
            if (
                now is None
                or now.uid != before.uid
                or now.deleting
                or now.status.get("lastOperation") != mark["lastOperation"]
            ):
                log.info("deprovision %s/%s: its mark was replaced; nothing to undo", before.namespace, before.name)
                return
            undo = records.unmarked_status(before.status, mark, now.status)
            if self.repository.guarded_status(now, undo) is not None:
                return
            now = self.repository.get(Kind.INSTANCE, before.namespace, before.name)
        log.warning(
            "deprovision %s/%s: could not undo its mark (the instance keeps changing); binds are refused until the "
            "next deprovision",
            before.namespace,
            before.name,
        )

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
