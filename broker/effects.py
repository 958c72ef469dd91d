"""Carrying out what the core decided: record the request, wait for the controller, build the HTTP reply.

The contract with the controller (see :mod:`opbroker.api.conventions`): a new object gets
``status.state: in_queue``; an update writes the new spec, then ``state: update``; a deprovision/unbind
writes ``state: delete`` and then DELETEs the object (the controller's finalizer tears down). Every
write carries ``status.lastOperation`` with the operation token the client polls.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi.responses import JSONResponse

from opbroker.api.osb import OperationState
from opbroker.broker import decisions, records
from opbroker.broker.decisions import Answer, Credentials
from opbroker.broker.headers import RequestMeta
from opbroker.broker.operations import OperationType, Token
from opbroker.broker.records import Kind, Record
from opbroker.broker.repository import Repository
from opbroker.broker.settings import Settings

log = logging.getLogger("opbroker.broker")


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
        token = Token.of(operation, created)
        status = records.requested_status(OperationState.IN_QUEUE, operation.value, token.encode(), records.now())
        return self.repository.queue_status(created, status)

    def record_change(self, record: Record, spec: dict[str, Any], meta: RequestMeta) -> Token:
        patched = self.repository.patch(record, records.spec_patch(record, spec, meta))
        token = Token.of(OperationType.UPDATE, patched)
        status = records.requested_status(
            OperationState.UPDATE, OperationType.UPDATE.value, token.encode(), records.now()
        )
        self.repository.queue_status(patched, status)
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
