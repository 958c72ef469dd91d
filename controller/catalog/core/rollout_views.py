"""Typed, read-only views of what a plan rollout (:mod:`opbroker.controller.catalog.rollouts`) reads: the plan's
instances and the SFPlan itself.

As every view (:mod:`opbroker.controller.core.views`): built once per object by ``.of(body)``, fields the server
adds ignored, a field of the wrong type read as absent; ``wire`` keeps the body for what is handed on whole (the
renderer's inputs, a registry's owner).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opbroker.controller.core.views import InstanceView, Meta
from opbroker.kubeclient.wire import JsonBody, JsonObject, mapping_of, text_of

__all__ = ["AdminRequestView", "PlanView", "RolloutInstance"]


@dataclass(frozen=True)
class RolloutInstance:
    """An SFServiceInstance as a rollout reads it: the shared :class:`InstanceView`, and where it is placed."""

    view: InstanceView
    cluster_id: str
    """``spec.clusterId`` ("" when unplaced: the master's own cluster)."""
    context_namespace: str | None
    """``spec.context.namespace``: the request's namespace, second in the renderer's namespace precedence."""

    @classmethod
    def of(cls, body: JsonObject) -> RolloutInstance:
        view = InstanceView.of(body)
        return cls(
            view=view,
            cluster_id=text_of(mapping_of(body.get("spec")).get("clusterId")) or "",
            context_namespace=text_of(view.context.get("namespace")),
        )

    @property
    def meta(self) -> Meta:
        return self.view.meta

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name)."""
        return self.view.meta.namespace, self.view.meta.name

    @property
    def where(self) -> str:
        """``namespace/name``: the API server lists in this order."""
        return f"{self.view.meta.namespace}/{self.view.meta.name}"

    @property
    def wire(self) -> JsonObject:
        return self.view.wire


@dataclass(frozen=True)
class PlanView:
    """An SFPlan as a rollout finds it: by its object name, OSB id or OSB name."""

    meta: Meta
    osb_id: str | None
    osb_name: str | None
    spec: JsonObject = field(repr=False, compare=False)
    """The spec as read (its hash says which version of the plan an instance was rendered from)."""
    metadata: JsonObject = field(repr=False, compare=False)
    """The metadata as read, handed to the renderer with a proposed spec."""
    wire: JsonObject = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: JsonObject) -> PlanView:
        spec = mapping_of(body.get("spec"))
        metadata = mapping_of(body.get("metadata"))
        return cls(
            meta=Meta.of(metadata),
            osb_id=text_of(spec.get("id")),
            osb_name=text_of(spec.get("name")),
            spec=spec,
            metadata=metadata,
            wire=body,
        )

    def answers_to(self, wanted: str) -> bool:
        """Whether ``wanted`` is its object name, OSB id or OSB name."""
        return wanted in (self.meta.name, self.osb_id, self.osb_name)

    @property
    def plan_id(self) -> str:
        """The id its instances name (``spec.id``; the object's name when absent)."""
        return self.osb_id or self.meta.name


@dataclass(frozen=True)
class AdminRequestView:
    """A preview or rollout request of the admin API (a ConfigMap, :mod:`opbroker.api.adminrequests`): its identity,
    which an answer is written to; its request and answer are read by that module's parsers from ``wire``."""

    meta: Meta
    wire: JsonObject = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: JsonObject) -> AdminRequestView:
        return cls(meta=Meta.of(body.get("metadata")), wire=body)

    @property
    def body(self) -> JsonBody:
        """The ConfigMap as the request parsers take it."""
        return dict(self.wire)
