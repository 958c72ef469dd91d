"""How OSB requests are recorded: the broker's view of a stored object, and the objects/patches it writes.

:class:`Record` is a plain snapshot of an ``SFServiceInstance`` / ``SFServiceBinding`` as the API server
returned it (tolerant of fields the broker does not know). The builders below turn a validated OSB
request into the custom resource the controller reconciles (spec = the request, labels and annotations
from :mod:`opbroker.api.conventions`) and into the status the broker writes (``in_queue`` / ``update`` /
``delete`` plus ``lastOperation``).

Pure: no I/O; the repository sends what these build.
"""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from opbroker.api import conventions
from opbroker.api.osb import (
    OperationState,
    SFServiceBinding,
    SFServiceBindingSpec,
    SFServiceInstance,
    SFServiceInstanceSpec,
)
from opbroker.api.shards import Shards
from opbroker.broker import bodies
from opbroker.broker.headers import RequestMeta

#: One controller for everything: objects carry no shard label.
UNSHARDED = Shards()


class Kind(StrEnum):
    INSTANCE = "instance"
    BINDING = "binding"

    @property
    def plural(self) -> str:
        return SFServiceInstance.PLURAL if self is Kind.INSTANCE else SFServiceBinding.PLURAL

    @property
    def model(self) -> type[SFServiceInstance] | type[SFServiceBinding]:
        return SFServiceInstance if self is Kind.INSTANCE else SFServiceBinding


@dataclass(frozen=True)
class Record:
    """An instance or binding as stored: identity, spec (wire form) and the status fields the broker reads."""

    kind: Kind
    namespace: str
    name: str
    uid: str
    generation: int = 1
    resource_version: str = ""
    deleting: bool = False
    spec: Mapping[str, Any] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    state: str | None = None
    operation_type: str | None = None
    operation_id: str | None = None
    observed_generation: int | None = None
    description: str | None = None
    error: str | None = None
    dashboard_url: str | None = None
    instance_usable: bool | None = None
    update_repeatable: bool | None = None
    secret_ref: str | None = None
    status: Mapping[str, Any] = field(default_factory=dict)
    """The status as stored (to write back exactly what a deprovision's mark replaced)."""
    recorded: bool = False
    """The broker recorded it for an OSB request (:data:`~opbroker.api.conventions.LABEL_RECORDED_BY`): only such
    an object answers for an OSB id."""

    @property
    def health(self) -> dict[str, str] | None:
        """The instance's live status as OSB ``metadata.attributes`` may show it (issue 43, day two): its Ready
        condition's status, reason and message (the operator's words); None before any is written."""
        conditions = self.status.get("conditions")
        if not isinstance(conditions, list):
            return None
        ready = next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Ready"), None)
        if ready is None or not isinstance(ready.get("status"), str):
            return None
        shown = {"ready": ready["status"].lower(), "reason": ready.get("reason"), "message": ready.get("message")}
        return {key: str(value) for key, value in shown.items() if isinstance(value, str) and value}

    @classmethod
    def from_object(cls, kind: Kind, obj: Mapping[str, Any]) -> Record:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        last = status.get("lastOperation") or {}
        response = status.get("response") or {}
        return cls(
            kind=kind,
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            generation=int(meta.get("generation") or 1),
            resource_version=str(meta.get("resourceVersion") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            spec=dict(obj.get("spec") or {}),
            annotations=dict(meta.get("annotations") or {}),
            state=status.get("state"),
            operation_type=last.get("type"),
            operation_id=last.get("id"),
            observed_generation=status.get("observedGeneration"),
            description=status.get("description"),
            error=status.get("error"),
            dashboard_url=status.get("dashboardUrl"),
            instance_usable=status.get("instanceUsable"),
            update_repeatable=status.get("updateRepeatable"),
            secret_ref=response.get("secretRef") if isinstance(response, Mapping) else None,
            status=dict(status),
            recorded=(meta.get("labels") or {}).get(conventions.LABEL_RECORDED_BY) == conventions.RECORDED_BY_BROKER,
        )


# -- specs ---------------------------------------------------------------------------------------------


def _wire(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def maintenance_info(info: bodies.MaintenanceInfo | None) -> dict[str, Any] | None:
    """Only the version is recorded (the specification ignores every other field)."""
    return {"version": info.version} if info is not None else None


def instance_spec(instance_id: str, request: bodies.ProvisionRequest) -> dict[str, Any]:
    """The provision request as an SFServiceInstance spec (wire form), validated by the resource model."""
    spec = {
        "instanceId": instance_id,
        "serviceId": request.service_id,
        "planId": request.plan_id,
        "organizationGuid": request.organization_guid,
        "spaceGuid": request.space_guid,
        "context": request.context,
        "parameters": request.parameters,
        "maintenance_info": maintenance_info(request.maintenance_info),
    }
    return _wire(SFServiceInstanceSpec.model_validate(spec))


def binding_spec(
    binding_id: str, instance_id: str, request: bodies.BindRequest, accepts_incomplete: bool
) -> dict[str, Any]:
    """The bind request as an SFServiceBinding spec. A top-level ``app_guid`` goes into ``bindResource``."""
    resource = dict(request.bind_resource or {})
    if request.app_guid is not None:
        resource.setdefault("app_guid", request.app_guid)
    spec = {
        "id": binding_id,
        "instanceId": instance_id,
        "serviceId": request.service_id,
        "planId": request.plan_id,
        "bindResource": resource or None,
        "context": request.context,
        "parameters": request.parameters,
        "acceptsIncomplete": accepts_incomplete,
    }
    return _wire(SFServiceBindingSpec.model_validate(spec))


def validated_instance_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """An instance spec computed by an update, checked against the resource model (wire form)."""
    return _wire(SFServiceInstanceSpec.model_validate(dict(spec)))


# -- metadata ----------------------------------------------------------------------------------------


def labels(*, service_id: str, plan_id: str, instance_name: str, binding_name: str | None = None) -> dict[str, str]:
    """Labels from the conventions; OSB ids pass through :func:`conventions.resource_name` to be valid values."""
    result = {
        conventions.LABEL_MANAGED_BY: conventions.MANAGED_BY,
        conventions.LABEL_RECORDED_BY: conventions.RECORDED_BY_BROKER,
        conventions.LABEL_SERVICE: conventions.resource_name(service_id),
        conventions.LABEL_PLAN: conventions.resource_name(plan_id),
        conventions.LABEL_INSTANCE: instance_name,
    }
    if binding_name is not None:
        result[conventions.LABEL_BINDING] = binding_name
    return result


def request_annotations(meta: RequestMeta) -> dict[str, str]:
    """Who asked (decoded originating identity, as JSON) and the request identity, when the headers had them."""
    result = {}
    if meta.originating_identity is not None:
        result[conventions.ANNOTATION_ORIGINATING_IDENTITY] = meta.originating_identity.to_json()
    if meta.request_identity is not None:
        result[conventions.ANNOTATION_REQUEST_IDENTITY] = meta.request_identity
    return result


def instance_object(
    *, name: str, namespace: str, spec: Mapping[str, Any], meta: RequestMeta, shards: Shards = UNSHARDED
) -> dict[str, Any]:
    """``shards``: the controller's; the instance is created labelled with the shard that handles it (issue 46)."""
    body = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels(service_id=spec["serviceId"], plan_id=spec["planId"], instance_name=name)
            | shards.label(namespace, name),
            "annotations": request_annotations(meta) or None,
            # Created with the controller's finalizer: saves the controller a write per object.
            "finalizers": [conventions.FINALIZER],
        },
        "spec": dict(spec),
    }
    return SFServiceInstance.model_validate(body).to_manifest()


def binding_object(
    *, name: str, instance: Record, spec: Mapping[str, Any], meta: RequestMeta, shards: Shards = UNSHARDED
) -> dict[str, Any]:
    """A binding lives beside its instance and is owned by it (so it cannot outlive it unnoticed), and is handled by
    its instance's shard (labelled so, ``shards``: the controller's)."""
    body = {
        "metadata": {
            "name": name,
            "namespace": instance.namespace,
            "labels": labels(
                service_id=spec["serviceId"], plan_id=spec["planId"], instance_name=instance.name, binding_name=name
            )
            | shards.label(instance.namespace, instance.name),
            "annotations": request_annotations(meta) or None,
            "finalizers": [conventions.FINALIZER],
        },
        "spec": dict(spec),
    }
    manifest = SFServiceBinding.model_validate(body).to_manifest()
    manifest["metadata"]["ownerReferences"] = [
        {
            "apiVersion": SFServiceInstance.api_version_string(),
            "kind": SFServiceInstance.KIND,
            "name": instance.name,
            "uid": instance.uid,
        }
    ]
    return manifest


# -- status ------------------------------------------------------------------------------------------


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_instants = threading.Lock()
_last_instant = datetime.datetime.min.replace(tzinfo=datetime.UTC)


def instant() -> str:
    """Now, to the microsecond and strictly increasing within the process: a ``startedAt`` that tells one
    request's write from another's (operation tokens cannot: they are deterministic)."""
    global _last_instant
    with _instants:
        moment = max(datetime.datetime.now(datetime.UTC), _last_instant + datetime.timedelta(microseconds=1))
        _last_instant = moment
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def requested_status(state: OperationState, operation_type: str, operation_id: str, started_at: str) -> dict[str, Any]:
    """The status the broker writes when it accepts a request: the request state and ``lastOperation``.

    The previous outcome's ``description``/``error``/usability flags are cleared (JSON merge patch nulls), so
    ``last_operation`` never reports an old failure for the new operation.
    """
    return {
        "state": state.value,
        "lastOperation": {"type": operation_type, "id": operation_id, "startedAt": started_at},
        "description": None,
        "error": None,
        "instanceUsable": None,
        "updateRepeatable": None,
    }


def unmarked_status(before: Mapping[str, Any], mark: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, Any]:
    """A status merge patch undoing ``mark`` (a status patch written over ``before``) on the status ``now``:
    every field the mark wrote that still holds the mark's value gets its ``before`` value back (absent:
    removed); a field someone changed since is left alone. On the status just marked, the exact ``before``.
    """
    undo: dict[str, Any] = {}
    for key, written in mark.items():
        if now.get(key) != written:
            continue
        previous = before.get(key)
        if isinstance(previous, Mapping) and isinstance(written, Mapping):
            # A merge patch merges maps: the keys the mark added and ``before`` lacked must be removed too.
            previous = {**dict.fromkeys(written), **previous}
        undo[key] = previous
    return undo


def spec_patch(record: Record, spec: Mapping[str, Any], meta: RequestMeta) -> list[dict[str, Any]]:
    """A JSON patch replacing the spec, guarded by the resourceVersion the decision was made on."""
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": record.resource_version},
        {"op": "replace", "path": "/spec", "value": dict(spec)},
    ]
    return ops + annotation_ops(record, meta)


def annotation_ops(record: Record, meta: RequestMeta) -> list[dict[str, Any]]:
    wanted = request_annotations(meta)
    if not wanted:
        return []
    if not record.annotations:
        return [{"op": "add", "path": "/metadata/annotations", "value": wanted}]
    return [
        {"op": "add", "path": "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1"), "value": value}
        for key, value in wanted.items()
    ]


def canonical(value: Any) -> str:
    """A stable text form for comparing request attributes (key order does not matter)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
