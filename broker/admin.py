"""The admin API: preview a plan change per instance, then roll it out paced (Service Fabrik's admin API for the
mass update, beside ``opbroker plan diff`` / ``update-instances``).

Served by the broker under ``/admin`` with credentials of its own (not the OSB platform's: a platform that may
provision must not be able to re-render every instance of a plan). The broker only records the request — a
ConfigMap in the control-plane namespace (:mod:`opbroker.api.adminrequests`) — and answers from what the
controller wrote back; the controller executes it with the CLI's code. Every answer of a request in flight is
202 with ``Retry-After``; a finished one is 200.

* ``POST /admin/plans/{plan}/preview`` (the proposed SFPlan; ``limit``, ``after``) → 202; a new preview of the
  plan replaces the previous one. ``GET`` → the page of per-instance diffs and ``nextAfter``.
* ``POST /admin/plans/{plan}/rollout`` (``batchSize``, ``rate``, ``onlyOutdated``, ``instanceNamespace``) → 202;
  409 while one of the plan is unfinished. ``GET`` → progress. ``DELETE`` → cancel (what is marked stays marked).
"""

from __future__ import annotations

import datetime
import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBasic
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from opbroker.api import adminrequests as wire
from opbroker.api.catalog import SFPlan
from opbroker.broker import errors
from opbroker.broker.documentation import admin_responses
from opbroker.kubeclient.lean import MERGE_PATCH, LeanCustomObjects, object_path
from opbroker.kubeclient.wire import mapping_of, string_map_of

#: The admin API's prefix; the broker's edge checks the admin credentials for every path under it.
PREFIX = "/admin"

router = APIRouter(prefix=PREFIX, tags=["admin"], dependencies=[Security(HTTPBasic(auto_error=False))])

PlanName = Annotated[
    str, Path(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description="SFPlan name.")
]


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class PreviewBody(_Body):
    proposed: dict[str, Any] = Field(description="The changed SFPlan (its spec.id is the plan's).")
    proposed_service: dict[str, Any] | None = Field(None, description="The changed SFService, if it changes too.")
    instance_namespace: str | None = Field(None, max_length=63)
    limit: int = Field(wire.DEFAULT_PREVIEW_LIMIT, ge=1, le=wire.MAX_PREVIEW_LIMIT)
    after: str | None = Field(None, max_length=317, description="`nextAfter` of the previous page.")
    context: int = Field(3, ge=0, le=10)


class RolloutBody(_Body):
    batch_size: int = Field(50, ge=1, le=wire.MAX_BATCH_SIZE)
    rate: float = Field(5.0, ge=0.01, le=wire.MAX_RATE)
    only_outdated: bool = False
    instance_namespace: str | None = Field(None, max_length=63)


class Admin:
    """The ConfigMaps of the admin requests, in the control-plane namespace."""

    def __init__(self, api_client: client.ApiClient, namespace: str, retry_after: int) -> None:
        self.api = LeanCustomObjects(api_client)  # the project's transport: bounded, and no client models
        self.namespace = namespace
        self.retry_after = retry_after

    def _path(self, name: str | None = None) -> str:
        return object_path("/api/v1", "configmaps", self.namespace, name)

    def plan_exists(self, name: str) -> bool:
        try:
            self.api.get_namespaced_custom_object(SFPlan.GROUP, SFPlan.VERSION, self.namespace, SFPlan.PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def read(self, kind: wire.Kind, plan: str) -> dict[str, Any] | None:
        try:
            found = mapping_of(self.api.request("GET", self._path(wire.object_name(kind, plan))))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        meta = mapping_of(found.get("metadata"))
        data = dict(string_map_of(found.get("data")))
        return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")}, "data": data}

    def submit(self, kind: wire.Kind, request: wire.PreviewRequest | wire.RolloutRequest) -> None:
        """Record ``request``; one left by an earlier request of the plan is replaced when it may be (a preview
        always, a rollout once finished), else 409."""
        manifest = wire.configmap(kind, self.namespace, request)
        try:
            self.api.request("POST", self._path(), body=manifest)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
        existing = self.read(kind, request.plan)
        if existing is None:
            raise errors.BrokerError(errors.Reason.CONFLICT, "the previous request is being removed: try again")
        if kind is wire.Kind.ROLLOUT:
            answer = _readable(lambda: wire.rollout_answer(existing))
            if answer is None or not answer.phase.finished:
                raise errors.BrokerError(
                    errors.Reason.CONFLICT, f"a rollout of plan {request.plan!r} is unfinished: cancel it or wait"
                )
        manifest["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        try:
            self.api.request("PUT", self._path(manifest["metadata"]["name"]), body=manifest)
        except ApiException as exc:
            if exc.status in (404, 409):
                raise errors.BrokerError(errors.Reason.CONFLICT, "another request changed it meanwhile") from None
            raise

    def cancel(self, plan: str) -> dict[str, Any] | None:
        """Set ``cancelled`` on the plan's rollout (None: there is none); guarded by its resourceVersion."""
        existing = self.read(wire.Kind.ROLLOUT, plan)
        if existing is None:
            return None
        request = _readable(lambda: wire.rollout_request(existing))
        if request is None or request.cancelled:
            return existing
        patch = {
            "metadata": {"resourceVersion": existing["metadata"]["resourceVersion"]},
            "data": {wire.REQUEST_KEY: request.model_copy(update={"cancelled": True}).to_json()},
        }
        try:
            self.api.request("PATCH", self._path(existing["metadata"]["name"]), body=patch, content_type=MERGE_PATCH)
        except ApiException as exc:
            if exc.status in (404, 409):
                raise errors.BrokerError(errors.Reason.CONFLICT, "the rollout changed meanwhile: try again") from None
            raise
        return self.read(wire.Kind.ROLLOUT, plan)

    def answer(self, kind: wire.Kind, obj: dict[str, Any]) -> JSONResponse:
        """200 with the controller's answer when finished, else 202 (with the progress so far) and Retry-After."""
        if kind is wire.Kind.PREVIEW:
            answer: wire.PreviewAnswer | wire.RolloutAnswer | None = _readable(lambda: wire.preview_answer(obj))
        else:
            answer = _readable(lambda: wire.rollout_answer(obj))
        body = json.loads(answer.to_json()) if answer is not None else {"phase": wire.Phase.PENDING.value}
        if kind is wire.Kind.ROLLOUT:
            request = _readable(lambda: wire.rollout_request(obj))
            if request is not None:
                body["request"] = json.loads(request.to_json())
        finished = answer is not None and answer.phase.finished
        return JSONResponse(body, status_code=200 if finished else 202, headers=self._retry(finished))

    def _retry(self, finished: bool) -> dict[str, str] | None:
        return None if finished else {"Retry-After": str(self.retry_after)}


def _readable(read: Any) -> Any:
    try:
        return read()
    except wire.Unreadable as exc:
        raise errors.BrokerError(errors.Reason.INTERNAL_ERROR, str(exc)) from None


def admin_of(request: Request) -> Admin:
    admin: Admin = request.app.state.admin
    return admin


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _known(admin: Admin, plan: str) -> None:
    if not admin.plan_exists(plan):
        raise errors.BrokerError(errors.Reason.NOT_FOUND, f"no SFPlan {plan!r} in namespace {admin.namespace!r}")


def _location(plan: str, kind: wire.Kind) -> dict[str, str]:
    return {"Location": f"{PREFIX}/plans/{plan}/{kind.value}"}


@router.post(
    "/plans/{plan}/preview",
    status_code=202,
    summary="Preview a plan change, per instance",
    responses=admin_responses(404, 409, 413),
)
def start_preview(plan: PlanName, body: PreviewBody, request: Request) -> JSONResponse:
    admin = admin_of(request)
    wanted = wire.PreviewRequest(
        plan=plan,
        proposed=body.proposed,
        proposed_service=body.proposed_service,
        instance_namespace=body.instance_namespace,
        limit=body.limit,
        after=body.after,
        context=body.context,
        requested_at=_now(),
    )
    size = len(wanted.to_json().encode())
    if size > wire.MAX_PLAN_BYTES:
        return JSONResponse(
            errors.http_body(413, f"the proposed plan takes {size} bytes; at most {wire.MAX_PLAN_BYTES}"),
            status_code=413,
        )
    _known(admin, plan)
    admin.submit(wire.Kind.PREVIEW, wanted)
    return JSONResponse(
        {"phase": wire.Phase.PENDING.value},
        status_code=202,
        headers={**_location(plan, wire.Kind.PREVIEW), "Retry-After": str(admin.retry_after)},
    )


@router.get(
    "/plans/{plan}/preview",
    summary="The preview: per-instance diffs (202 until the controller answered)",
    responses=admin_responses(404, polled=True),
)
def get_preview(plan: PlanName, request: Request) -> JSONResponse:
    admin = admin_of(request)
    found = admin.read(wire.Kind.PREVIEW, plan)
    if found is None:
        raise errors.BrokerError(errors.Reason.NOT_FOUND, f"no preview of plan {plan!r}")
    return admin.answer(wire.Kind.PREVIEW, found)


@router.post(
    "/plans/{plan}/rollout",
    status_code=202,
    summary="Start the mass update of the plan's instances",
    responses=admin_responses(404, 409, 413),
)
def start_rollout(plan: PlanName, body: RolloutBody, request: Request) -> JSONResponse:
    admin = admin_of(request)
    _known(admin, plan)
    wanted = wire.RolloutRequest(
        plan=plan,
        batch_size=body.batch_size,
        rate=body.rate,
        only_outdated=body.only_outdated,
        instance_namespace=body.instance_namespace,
        requested_at=_now(),
    )
    admin.submit(wire.Kind.ROLLOUT, wanted)
    return JSONResponse(
        {"phase": wire.Phase.PENDING.value, "request": json.loads(wanted.to_json())},
        status_code=202,
        headers={**_location(plan, wire.Kind.ROLLOUT), "Retry-After": str(admin.retry_after)},
    )


@router.get(
    "/plans/{plan}/rollout",
    summary="The rollout's progress (202 while it runs)",
    responses=admin_responses(404, polled=True),
)
def get_rollout(plan: PlanName, request: Request) -> JSONResponse:
    admin = admin_of(request)
    found = admin.read(wire.Kind.ROLLOUT, plan)
    if found is None:
        raise errors.BrokerError(errors.Reason.NOT_FOUND, f"no rollout of plan {plan!r}")
    return admin.answer(wire.Kind.ROLLOUT, found)


@router.delete(
    "/plans/{plan}/rollout",
    summary="Cancel the rollout (instances already marked stay marked)",
    responses=admin_responses(404, 409, polled=True),
)
def cancel_rollout(plan: PlanName, request: Request) -> JSONResponse:
    admin = admin_of(request)
    found = admin.cancel(plan)
    if found is None:
        raise errors.BrokerError(errors.Reason.NOT_FOUND, f"no rollout of plan {plan!r}")
    return admin.answer(wire.Kind.ROLLOUT, found)
