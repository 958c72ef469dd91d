"""File 1 of 4 — the view: what the example kind's reconciler reads of its wire object, typed and read-only.

A ``Greeting`` (``examples.opbroker.test/v1``) asks for a greeting: ``spec.name``; its status says the greeting
and the generation it answers. Built once per pass with the shared readers (``controller/core/views.py``), so a
field of the wrong type reads as absent, never as an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opbroker.controller.core.views import Meta
from opbroker.controller.runtime.kube import Kind
from opbroker.kubeclient.wire import int_of, mapping_of, text_of

GREETINGS = Kind("examples.opbroker.test", "v1", "greetings")


@dataclass(frozen=True)
class GreetingView:
    meta: Meta
    name: str | None
    """``spec.name``: whom to greet (absent or not a string: nobody)."""
    greeting: str | None
    """``status.greeting``, as written last."""
    observed_generation: int | None
    wire: Mapping[str, Any] = field(repr=False, compare=False)
    """The body as read: the executor writes from its metadata (finalizers, resourceVersion)."""

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> GreetingView:
        status = mapping_of(body.get("status"))
        return cls(
            meta=Meta.of(body.get("metadata")),
            name=text_of(mapping_of(body.get("spec")).get("name")),
            greeting=text_of(status.get("greeting")),
            observed_generation=int_of(status.get("observedGeneration")),
            wire=body,
        )
