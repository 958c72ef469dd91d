"""Admin requests: what the broker's admin API asks the controller to do for a plan, and what it answers.

The broker serves the admin API (``/admin``, credentials of their own) but does not act on instances: it
writes a request into a ConfigMap of the control-plane namespace, and the controller — the one process that
already renders and re-renders instances, active on one replica only — executes it with the code behind
``opbroker plan diff`` and ``opbroker plan update-instances`` and writes its answer into the same ConfigMap.
So a rollout survives a broker restart, two broker replicas never run it twice, and any replica answers its
progress. One request of each kind per plan at a time: the ConfigMap's name is derived from the plan's.

* ``preview``: the proposed SFPlan, which of the plan's instances to compare (a page: ``limit`` after the
  instance ``after``); answer: a per-instance diff (each bounded), a summary and the cursor of the next page.
* ``rollout``: pacing (``batchSize`` per page, ``rate`` marks per second), ``onlyOutdated``, and
  ``cancelled`` (set by the admin API to stop it); answer: the phase and the counts so far.

Pure: the wire shapes (pydantic, camelCase as the CRDs), names and limits; no I/O.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from opbroker.api.conventions import DOMAIN

#: Label on every admin-request ConfigMap; its value is the kind (``preview`` or ``rollout``).
LABEL = f"{DOMAIN}/admin-request"
#: Label naming the SFPlan (its metadata.name) a request is for.
PLAN_LABEL = f"{DOMAIN}/plan"
REQUEST_KEY = "request.json"
ANSWER_KEY = "answer.json"

#: A ConfigMap holds at most 1 MiB; the proposed plan gets at most half of it, the answer the other half.
MAX_PLAN_BYTES = 512 * 1024
MAX_ANSWER_BYTES = 400 * 1024
#: One instance's diff is cut after this many bytes (``truncated`` says so): a preview page of
#: ``MAX_PREVIEW_LIMIT`` instances then stays under ``MAX_ANSWER_BYTES`` whatever the templates render.
MAX_DIFF_BYTES = 3 * 1024
MAX_PREVIEW_LIMIT = 100
DEFAULT_PREVIEW_LIMIT = 20
#: Pacing bounds: a page of at most 500 instances (the API server's list page), 0.01 to 50 marks per second.
MAX_BATCH_SIZE = 500
MAX_RATE = 50.0
#: The most recent marked instances the rollout's answer lists (the counts cover every one).
RECENT = 20


class Kind(StrEnum):
    PREVIEW = "preview"
    ROLLOUT = "rollout"


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def finished(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED)


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)


class PreviewRequest(_Wire):
    """What the admin asks to preview: ``proposed`` (an SFPlan manifest) against the plan in the catalog."""

    plan: str
    proposed: dict[str, Any]
    proposed_service: dict[str, Any] | None = None
    instance_namespace: str | None = None
    limit: int = Field(DEFAULT_PREVIEW_LIMIT, ge=1, le=MAX_PREVIEW_LIMIT)
    after: str | None = None
    """``namespace/name`` of the last instance of the previous page: this page starts after it."""
    context: int = Field(3, ge=0, le=10)
    requested_at: str


class InstancePreview(_Wire):
    namespace: str
    name: str
    change: str
    diff: str = ""
    truncated: bool = False
    error: str | None = None
    note: str | None = None


class PreviewAnswer(_Wire):
    phase: Phase
    instances: list[InstancePreview] = Field(default_factory=list)
    changed: int = 0
    unchanged: int = 0
    failing: int = 0
    next_after: str | None = None
    """Give it as ``after`` for the next page; absent on the last page."""
    message: str | None = None
    acting_as: str | None = None
    """Whom the templates' live reads acted as (the plan's ServiceAccount), when the answer says."""


class RolloutRequest(_Wire):
    """A mass update of the plan's instances, paced; ``cancelled`` stops it at the next instance."""

    plan: str
    batch_size: int = Field(50, ge=1, le=MAX_BATCH_SIZE)
    rate: float = Field(5.0, ge=0.01, le=MAX_RATE)
    only_outdated: bool = False
    instance_namespace: str | None = None
    cancelled: bool = False
    requested_at: str


class RolloutAnswer(_Wire):
    phase: Phase
    marked: int = 0
    skipped: dict[str, int] = Field(default_factory=dict)
    pages: int = 0
    recent: list[str] = Field(default_factory=list)
    """The last :data:`RECENT` instances marked, ``namespace/name``."""
    message: str | None = None
    updated_at: str | None = None


def object_name(kind: Kind, plan: str) -> str:
    """The request ConfigMap's name for ``plan`` (an SFPlan name, at most 253 characters): readable when it fits,
    else a prefix and a digest, so two plans never share one."""
    name = f"opbroker-{kind.value}-{plan}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(plan.encode()).hexdigest()[:16]
    return f"{name[:236]}-{digest}"


def configmap(kind: Kind, namespace: str, request: PreviewRequest | RolloutRequest) -> dict[str, Any]:
    """The ConfigMap carrying ``request``, without an answer yet."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": object_name(kind, request.plan),
            "namespace": namespace,
            "labels": {LABEL: kind.value, PLAN_LABEL: _label_value(request.plan)},
        },
        "data": {REQUEST_KEY: request.to_json()},
    }


def _label_value(plan: str) -> str:
    return plan if len(plan) <= 63 else hashlib.sha256(plan.encode()).hexdigest()[:63]


def kind_of(obj: dict[str, Any]) -> Kind | None:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL)
    return Kind(value) if value in (Kind.PREVIEW.value, Kind.ROLLOUT.value) else None


class Unreadable(ValueError):
    """The ConfigMap's request or answer is not what opbroker writes (edited by hand, say)."""


def _load(obj: dict[str, Any], key: str, model: type[Any]) -> Any:
    text = (obj.get("data") or {}).get(key)
    if text is None:
        return None
    try:
        return model.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        raise Unreadable(f"{key} of ConfigMap {(obj.get('metadata') or {}).get('name')!r}: {exc}") from None


def preview_request(obj: dict[str, Any]) -> PreviewRequest | None:
    found: PreviewRequest | None = _load(obj, REQUEST_KEY, PreviewRequest)
    return found


def preview_answer(obj: dict[str, Any]) -> PreviewAnswer | None:
    found: PreviewAnswer | None = _load(obj, ANSWER_KEY, PreviewAnswer)
    return found


def rollout_request(obj: dict[str, Any]) -> RolloutRequest | None:
    found: RolloutRequest | None = _load(obj, REQUEST_KEY, RolloutRequest)
    return found


def rollout_answer(obj: dict[str, Any]) -> RolloutAnswer | None:
    found: RolloutAnswer | None = _load(obj, ANSWER_KEY, RolloutAnswer)
    return found


def cut(diff: str, limit: int = MAX_DIFF_BYTES) -> tuple[str, bool]:
    """``diff`` cut to at most ``limit`` UTF-8 bytes at a line end (whether it was cut)."""
    encoded = diff.encode()
    if len(encoded) <= limit:
        return diff, False
    head = encoded[:limit].decode("utf-8", errors="ignore")
    return head[: head.rfind("\n") + 1], True


__all__ = [
    "ANSWER_KEY",
    "LABEL",
    "REQUEST_KEY",
    "InstancePreview",
    "Kind",
    "Phase",
    "PreviewAnswer",
    "PreviewRequest",
    "RolloutAnswer",
    "RolloutRequest",
    "Unreadable",
    "configmap",
    "cut",
    "object_name",
]
